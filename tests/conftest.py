"""Shared fixtures: scripted OpenAI-compatible servers on 127.0.0.1 and tiny datasets.

Everything that talks to a "model" here goes over real HTTP (``ScriptedServer`` in a
thread, ``vf.make_client`` on the client side), so the tests exercise the same
client stack (openai SDK, aiohttp transport, retries, error mapping) as production.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator

import openai
import pytest

import verifiers as vf
from verifiers.testing import ScriptedServer, ServerScript

# Three questions; the default script echoes the last user message, so the first two
# are "answered correctly" (answer == question) and the third is not.
ROWS = [
    {"question": "alpha", "answer": "alpha"},
    {"question": "beta", "answer": "beta"},
    {"question": "gamma", "answer": "not-gamma"},
]


@pytest.fixture
def rows() -> list[dict[str, str]]:
    return [dict(r) for r in ROWS]


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    """A started scripted server that echoes the last user message."""
    with ScriptedServer() as srv:
        yield srv


@pytest.fixture
def make_server() -> Iterator[Callable[..., ScriptedServer]]:
    """Factory for extra servers (a judge, a failing server, ...), all stopped at teardown."""
    started: list[ScriptedServer] = []

    def make(script: ServerScript | None = None, **script_kwargs: object) -> ScriptedServer:
        if script is None:
            script = ServerScript(**script_kwargs)  # type: ignore[arg-type]
        srv = ScriptedServer(script).start()
        started.append(srv)
        return srv

    yield make
    for srv in started:
        srv.stop()


@pytest.fixture
async def client(server: ScriptedServer) -> AsyncIterator[openai.AsyncOpenAI]:
    """An aiohttp-transport client for ``server`` without retries (failures surface at once)."""
    c = vf.make_client(server.base_url, max_retries=0)
    yield c
    await c.close()


@pytest.fixture
async def make_client() -> AsyncIterator[Callable[..., openai.AsyncOpenAI]]:
    """Factory for clients (closed at teardown)."""
    made: list[openai.AsyncOpenAI] = []

    def make(base_url: str, **kwargs: object) -> openai.AsyncOpenAI:
        kwargs.setdefault("max_retries", 0)
        c = vf.make_client(base_url, **kwargs)  # type: ignore[arg-type]
        made.append(c)
        return c

    yield make
    for c in made:
        await c.close()


def _exact_match(completion: vf.Messages, answer: str) -> float:
    """1.0 when the last assistant message equals the answer."""
    if isinstance(completion, str):
        return float(completion.strip() == answer)
    texts = [m.get("content") or "" for m in completion if m.get("role") == "assistant"]
    return float(bool(texts) and texts[-1].strip() == answer)


_exact_match.__name__ = "exact_match"


@pytest.fixture
def exact_match() -> Callable[[vf.Messages, str], float]:
    """A reward function named ``exact_match``: last assistant text == answer."""
    return _exact_match
