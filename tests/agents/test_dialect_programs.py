"""Unmodified programs in the SDKs' default dialects: the Responses API and Anthropic Messages.

``programs/openai_agents_default.py`` is an OpenAI Agents SDK app with nothing for the gateway
(no ``set_default_openai_api``: the SDK calls ``POST /responses``), run plain, streamed, and
chained by ``previous_response_id``. ``programs/anthropic_lookup.py`` is the ``anthropic``
SDK's tool-use loop (``POST /v1/messages``, plain and streamed), reaching the gateway through
``ANTHROPIC_BASE_URL`` / ``ANTHROPIC_API_KEY``, which `AgentEnv` sets. Each runs in its own
venv through `AgentEnv`: against `ScriptedServer` every call is checked (the upstream chat
request, the tool the program ran, its result in the next call, the recorded ids), and against
the embedded server with a tiny random model (and its tokenizer, so follow-ups go token-in)
every recorded call's ids must be the server's.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import verifiers as vf
from verifiers.testing import ScriptedReply, ScriptedServer, ScriptedToolCall, ServerScript
from verifiers.testing.script import render_chat

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # the first run builds the venvs

PROGRAMS = Path(__file__).parent / "programs"
AGENTS_PROGRAM = PROGRAMS / "openai_agents_default.py"
ANTHROPIC_PROGRAM = PROGRAMS / "anthropic_lookup.py"
AGENTS_INSTRUCTIONS = "Answer the task. Use `lookup` to read values from the task's table. Reply with the value only."
ANTHROPIC_SYSTEM = "Answer the task. Use the lookup tool to read values from the task's table. Reply with the value only."
ROW = {"question": "What is stored under A?", "answer": "4133", "info": {"table": {"A": "4133", "B": "17"}}}
SCRIPT = ServerScript(replies=[
    ScriptedReply(turn=0, tool_calls=[ScriptedToolCall(name="lookup", arguments='{"key": "A"}')]),
    ScriptedReply(content="{last_message}"),  # echoes the tool's answer: only the program's tool knows it
])
TRACING_OFF = {"OPENAI_AGENTS_DISABLE_TRACING": "1"}  # the SDK would export traces to api.openai.com


def _stdout_is_answer(state: dict[str, Any], answer: str, **_: Any) -> float:
    return float(state["agent"]["stdout"].strip() == answer)


def _env(python: Path, program: Path, *args: str, **kw: Any) -> vf.AgentEnv:
    return vf.AgentEnv(command=[str(python), str(program), *args], dataset=[ROW],
                       rubric=vf.Rubric(funcs=[_stdout_is_answer]), timeout_s=180, **kw)


async def _run_all(envs: dict[str, vf.AgentEnv], client: Any, model: str) -> dict[str, Any]:
    outs = await asyncio.gather(*(env.a_generate([ROW], client, model) for env in envs.values()))
    return {name: out.results[0] for name, out in zip(envs, outs, strict=True)}


def _check_linear_lookup(r: Any, sent: list[dict[str, Any]], first: list[dict[str, Any]]) -> None:
    """Two calls: the model asks for lookup(A), the program runs it, the result is in call 2."""
    assert r.error is None, (r.error, r.state["agent"]["stderr"])
    assert r.reward == 1.0 and r.state["agent"]["stdout"] == "4133\n"
    assert len(sent) == 2 and r.state["agent"]["num_calls"] == 2
    assert sent[0]["messages"] == first and sent[0]["model"] == "policy"
    assert [t["function"]["name"] for t in sent[0]["tools"]] == ["lookup"]
    assert sent[1]["messages"][: len(first)] == first
    assistant, tool = sent[1]["messages"][len(first):]
    assert assistant["role"] == "assistant" and assistant["tool_calls"][0]["function"]["name"] == "lookup"
    assert tool == {"role": "tool", "tool_call_id": assistant["tool_calls"][0]["id"], "content": "4133"}
    for request, turn in zip(sent, r.tokens, strict=True):  # the scripted server's ids: one per character
        assert turn.prompt_ids == [ord(c) for c in render_chat(request["messages"])[0]]
    assert r.tokens[1].completion_ids == [ord(c) for c in "4133"]
    assert r.token_sequence().prefix_consistent  # one growing conversation: one training row
    assert r.completion[-1] == {"role": "assistant", "content": "4133"}


async def test_agents_sdk_default_responses_mode_plain_streamed_and_chained(openai_agents_python: Path) -> None:
    modes = {"plain": (), "stream": ("--stream",), "chain": ("--chain",)}
    servers = {name: ScriptedServer(SCRIPT).start() for name in modes}
    try:
        envs = {name: _env(openai_agents_python, AGENTS_PROGRAM, *args, env=TRACING_OFF) for name, args in modes.items()}
        results = await asyncio.gather(*(envs[n].a_generate([ROW], vf.make_client(base_url=servers[n].base_url), "policy")
                                         for n in modes))
    finally:
        for srv in servers.values():
            srv.stop()
    first = [{"role": "system", "content": AGENTS_INSTRUCTIONS}, {"role": "user", "content": ROW["question"]}]
    for name, out in zip(modes, results, strict=True):
        _check_linear_lookup(out.results[0], servers[name].requests, first)
    # --chain: the second call named the first response instead of resending it; the gateway
    # rebuilt the same conversation from its store, so the upstream calls are the same.
    assert servers["chain"].requests[1]["messages"] == servers["plain"].requests[1]["messages"]
    def previous_ids(name: str) -> list[Any]:
        session = results[list(modes).index(name)].results[0].state["agent_session"]
        return [stored.response["previous_response_id"] for stored in session.responses.values()]

    first_id = next(iter(results[2].results[0].state["agent_session"].responses))
    assert previous_ids("chain") == [None, first_id] and previous_ids("plain") == [None, None]


async def test_anthropic_sdk_tool_loop_plain_and_streamed(anthropic_python: Path) -> None:
    modes = {"plain": (), "stream": ("--stream",)}
    servers = {name: ScriptedServer(SCRIPT).start() for name in modes}
    try:
        outs = await asyncio.gather(*(_env(anthropic_python, ANTHROPIC_PROGRAM, *args).a_generate(
            [ROW], vf.make_client(base_url=servers[name].base_url), "policy") for name, args in modes.items()))
    finally:
        for srv in servers.values():
            srv.stop()
    first = [{"role": "system", "content": ANTHROPIC_SYSTEM}, {"role": "user", "content": ROW["question"]}]
    for name, out in zip(modes, outs, strict=True):
        _check_linear_lookup(out.results[0], servers[name].requests, first)
        assert "max_tokens" not in servers[name].requests[0]  # the program's 1024 is not the environment's


async def test_tiny_model_ids_are_the_servers_in_both_dialects(
        openai_agents_python: Path, anthropic_python: Path, tapped_tiny_client: Any, tiny_tokenizer: Any,
        check_server_ids: Any) -> None:
    client, tap = tapped_tiny_client
    kw = {"sampling_args": {"max_tokens": 24, "temperature": 1.0}, "tokenizer": tiny_tokenizer}
    envs = {
        "responses": _env(openai_agents_python, AGENTS_PROGRAM, "--chain", env=TRACING_OFF, **kw),
        "messages": _env(anthropic_python, ANTHROPIC_PROGRAM, "--stream", **kw),
    }
    results = await _run_all(envs, client, "tiny")
    assert check_server_ids(list(results.values()), tap) >= 2
    for r in results.values():
        agent = r.state["agent"]
        assert agent["num_calls"] >= 1 and not agent["timed_out"]
        assert {t["function"]["name"] for t in agent["calls"][0].tools} == {"lookup"}
        # Random text is the final answer (printed) or a tool call the program runs or rejects:
        # either way a result, never an exception.
        if agent["exit_code"] == 0:
            assert r.error is None and r.stop_reason == "completed"
        else:
            assert r.error is not None and r.error.type == "AgentCrashedError"
