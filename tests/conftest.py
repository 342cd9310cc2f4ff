"""Shared fixtures: scripted OpenAI-compatible servers on 127.0.0.1, tiny datasets, benchmark scripts.

Everything that talks to a "model" here goes over real HTTP (``ScriptedServer`` in a
thread, ``vf.make_client`` on the client side), so the tests exercise the same
client stack (openai SDK, aiohttp transport, retries, error mapping) as production.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

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


@pytest.fixture(scope="module")
def benchmark_script() -> Iterator[Callable[[str], Any]]:
    """``load(name)``: ``benchmarks/<name>.py`` as a module (the benchmarks are scripts, not a package)."""
    loaded: list[str] = []

    def load(name: str) -> Any:
        path = Path(__file__).resolve().parent.parent / "benchmarks" / f"{name}.py"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up while a class is built
        loaded.append(name)
        spec.loader.exec_module(module)
        return module

    yield load
    for name in loaded:
        sys.modules.pop(name, None)


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


@pytest.fixture(scope="session")
def teach_conversation() -> Callable[..., None]:
    """``teach_conversation(model_dir, conversation, tools=None, *, lr, max_steps, tolerance)``:
    supervised steps of a tiny model on one conversation (rendered by its chat template) until it
    reproduces the assistant turns, saved in place. A random tiny model never stops or calls a
    tool; a few seconds of this make it (vLLM tests, rows built from taught rollouts)."""

    def teach(model_dir: Path, conversation: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, *,
              lr: float = 3e-3, max_steps: int = 600, tolerance: float = 5e-3) -> None:
        import torch

        from trainers.grpo.data.batch import expert_rows
        from verifiers.inference.engine.loading import load_model_and_tokenizer

        model, tok = load_model_and_tokenizer(model_dir)
        (row,) = expert_rows(tok, [conversation], 4096, tools=[tools] if tools is not None else None)
        ids = torch.tensor([row.input_ids])
        mask = torch.tensor([row.loss_mask], dtype=torch.float32)
        opt = torch.optim.Adam(model.parameters(), lr=lr)
        model.train()
        for _ in range(max_steps):
            logits = model(input_ids=ids).logits[0, :-1].float()
            loss = (torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="none") * mask[0]).sum()
            loss = loss / mask.sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if loss.item() < 2e-3:
                break
        assert loss.item() < tolerance, f"the tiny model did not learn the conversation (loss {loss.item():.4f})"
        model.eval()
        model.save_pretrained(model_dir)

    return teach


@pytest.fixture(scope="session")
def left_alive() -> Callable[..., dict[int, str]]:
    """``left_alive(procs)``: those of ``procs`` (``psutil.Process`` objects of processes a test
    started) still running after up to 60 s, as ``{pid: command line}`` so a failure says what
    was left; zombies count as gone. The Ray tests check their clusters' processes with it.

    A process is its pid *and* its start time (``psutil.Process.is_running``): on a machine with
    32,768 pids a CI run wraps around, and a pid of ours that exited can name someone else's
    process by teardown. 60 s, not less: on a loaded 2-core machine a Ray worker can take tens of
    seconds to notice its raylet is gone.
    """
    import time

    import psutil

    def running(p: psutil.Process) -> bool:
        try:
            return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    def command(p: psutil.Process) -> str:
        try:
            return " ".join(p.cmdline())[:200]
        except psutil.Error:
            return "?"

    def check(procs: Iterable[psutil.Process], timeout_s: float = 60.0) -> dict[int, str]:
        deadline = time.monotonic() + timeout_s
        alive = set(procs)
        while alive and time.monotonic() < deadline:
            alive = {p for p in alive if running(p)}
            time.sleep(0.2)
        return {p.pid: command(p) for p in sorted(alive, key=lambda p: p.pid)}

    return check
