"""Fixtures for real agent programs from PyPI: their virtualenvs, a tiny-model server, a wiretap.

Each program runs unchanged, in its own venv built from a pinned requirements file here (see
_venvs.py), as the subprocess of an `AgentEnv` rollout. The model behind the gateway is either
a `ScriptedServer` (deterministic replies, one token per character) or the embedded server with
a tiny random model; for the latter, `ServerTap` keeps the server's own JSON answers, read on
the wire between the gateway and the server, so a test can compare what the gateway recorded
with what the server sent.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
PROGRAMS = HERE / "programs"
TINY_MODEL = "tiny"
TINY_CONTEXT = 16384
"""smolagents' prompts run to ~6,000 characters (one token each with the tiny tokenizer)."""


def _load(name: str) -> Any:
    # Loaded by path: tests run with --import-mode=importlib, so sibling modules are not importable by name.
    path = HERE / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"vf_tests_agents_{name}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


venvs = _load("_venvs")


@pytest.fixture(scope="session")
def openai_agents_python() -> Path:
    """The interpreter of the OpenAI Agents SDK program's venv (openai-agents + mcp-server-calculator)."""
    return venvs.agent_python(HERE / "requirements-openai-agents.txt")


@pytest.fixture(scope="session")
def smolagents_python() -> Path:
    """The interpreter of the smolagents program's venv."""
    return venvs.agent_python(HERE / "requirements-smolagents.txt")


@pytest.fixture(scope="session")
def anthropic_python() -> Path:
    """The interpreter of the Anthropic SDK program's venv."""
    return venvs.agent_python(HERE / "requirements-anthropic.txt")


# -- the embedded server with a tiny random model ------------------------------------------
@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from verifiers.models.tiny import TinyModelSpec, save_tiny_model

    spec = TinyModelSpec(seed=0, max_position_embeddings=TINY_CONTEXT)
    return save_tiny_model(tmp_path_factory.mktemp("agents-tiny") / "model", spec)


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir: Path) -> Any:
    from verifiers.inference.engine.loading import load_tokenizer

    tokenizer = load_tokenizer(tiny_model_dir)
    tokenizer.model_max_length = TINY_CONTEXT  # as the served model's (no length warnings)
    return tokenizer


@pytest.fixture(scope="session")
def tiny_server(tiny_model_dir: Path) -> Iterator[Any]:
    """The embedded OpenAI-compatible server on 127.0.0.1 over the tiny model (one torch thread)."""
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    import torch

    from verifiers.inference.engine import InferenceEngine
    from verifiers.inference.server.runner import EmbeddedServer

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model; extra threads only contend on a small machine
    try:
        with InferenceEngine.from_pretrained(tiny_model_dir) as engine, EmbeddedServer(engine, [TINY_MODEL]) as srv:
            yield srv
    finally:
        torch.set_num_threads(threads)


class ServerTap:
    """The server's answers to ``/chat/completions`` (and ``/completions``, where token-in sends
    its id prompts), in order, as read on the wire.

    Installed as an httpx response hook on the client the environment calls the server with,
    so it sees the server's JSON (token ids included) before the gateway parses it.
    """

    def __init__(self) -> None:
        self.exchanges: list[tuple[dict[str, Any], int, dict[str, Any]]] = []

    async def __call__(self, response: Any) -> None:
        if not response.request.url.path.endswith("/completions"):
            return
        await response.aread()
        self.exchanges.append((json.loads(response.request.content), response.status_code, response.json()))

    def answered(self) -> list[dict[str, Any]]:
        """The successful answers' bodies, in the order the server sent them."""
        return [body for _, status, body in self.exchanges if status == 200]


@pytest.fixture
async def tapped_tiny_client(tiny_server: Any) -> AsyncIterator[tuple[Any, ServerTap]]:
    """An ``AsyncOpenAI`` client of the tiny server, and the tap that records its answers."""
    import httpx2 as httpx  # the HTTP library of the openai SDK (openai>=3)
    import openai

    tap = ServerTap()
    http = httpx.AsyncClient(event_hooks={"response": [tap]}, timeout=300)
    client = openai.AsyncOpenAI(base_url=tiny_server.base_url, api_key="EMPTY", http_client=http, max_retries=0)
    try:
        yield client, tap
    finally:
        await client.close()


def check_ids_are_the_servers(results: list[Any], tap: ServerTap, tokenizer: Any) -> int:
    """Every recorded call of ``results`` is one answer of the server, token for token; returns the count.

    Each call's prompt and completion ids and logprobs must be those of exactly one answer the
    server sent (rollouts run concurrently, so answers are matched by their ids, and every
    answer must be matched once). For a call whose messages went upstream as messages (not as
    token ids, see ``GatewayCall.token_in``), the prompt ids must also be what the tiny
    tokenizer's chat template makes of the messages and tools the program sent; a token-in call
    (a ``/completions`` answer) must start with the exact ids of an earlier call of its rollout.
    """
    from verifiers.data.templating import apply_chat_template

    def ids(answer: dict[str, Any]) -> tuple[Any, Any]:
        choice = answer["choices"][0]
        return answer.get("prompt_token_ids") or choice.get("prompt_token_ids"), choice["token_ids"]

    answers = tap.answered()
    calls = [c for r in results for c in r.state["agent"]["calls"] if c.tokens is not None]
    assert len(calls) == len(answers), (len(calls), len(answers))
    matched: set[int] = set()
    for r in results:
        earlier: list[Any] = []
        for call in (c for c in r.state["agent"]["calls"] if c.tokens is not None):
            tokens = call.tokens
            hits = [i for i, a in enumerate(answers) if ids(a) == (tokens.prompt_ids, tokens.completion_ids)]
            assert len(hits) == 1, f"call {call.seq}: {len(hits)} server answers carry its ids"
            choice = answers[hits[0]]["choices"][0]
            if call.token_in:  # an id prompt to /completions: the earlier call's ids, then the new tail
                assert "text" in choice and any(extends(tokens, e) for e in earlier)
                assert tokens.completion_logprobs == choice["logprobs"]["token_logprobs"]
                assert tokens.finish_reason in (choice["finish_reason"], "tool_calls")  # tool calls parsed here
            else:  # the messages went upstream: the server rendered them with its template
                assert tokens.completion_logprobs == [lp["logprob"] for lp in choice["logprobs"]["content"]]
                assert tokens.finish_reason == choice["finish_reason"]
                assert call.reply is not None
                assert (call.reply.get("content") or "") == (choice["message"].get("content") or "")
                assert tokens.prompt_ids == list(apply_chat_template(tokenizer, call.messages, tools=call.tools))
            earlier.append(tokens)
            matched.add(hits[0])
    assert len(matched) == len(answers)
    for r in results:  # the rollout's token record is its calls' records, in order
        assert r.tokens == [c.tokens for c in r.state["agent"]["calls"] if c.tokens is not None]
    return len(calls)


@pytest.fixture
def check_server_ids(tiny_tokenizer: Any) -> Any:
    """`check_ids_are_the_servers` bound to the tiny tokenizer."""
    return lambda results, tap: check_ids_are_the_servers(results, tap, tiny_tokenizer)


def extends(later: Any, earlier: Any) -> bool:
    """True when ``later``'s prompt ids start with ``earlier``'s prompt + completion ids."""
    context = [*earlier.prompt_ids, *earlier.completion_ids]
    return later.prompt_ids[: len(context)] == context


@pytest.fixture
def prefix_of() -> Any:
    """`extends` (fixtures are how test modules reach conftest helpers under importlib imports)."""
    return extends


@pytest.fixture
def agent_venvs() -> Any:
    """The _venvs module (how the agent venvs are built and cached)."""
    return venvs
