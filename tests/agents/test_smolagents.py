"""An unmodified smolagents ToolCallingAgent (smolagents 1.26.0, from PyPI) as an `AgentEnv` rollout.

The program (programs/smolagents_lookup.py) plans before every step (``planning_interval=1``).
Planning is where a real agent rewrites its history: a planning call starts from a fresh
prompt (no system prompt, earlier plans dropped, the memory summarised), and smolagents keeps
the model's tool calls in its memory as text. These tests check call by call what the program
sends, that the tool it runs is real, and that the recorded calls are indeed not one growing
token sequence (the case the trainer must split into several rows instead of dropping); with
the tiny model, that every recorded id is the server's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import verifiers as vf
from verifiers.testing import ScriptedReply, ScriptedServer, ScriptedToolCall, ServerScript
from verifiers.testing.script import render_chat

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # the first run builds the venv (20-60 s here)

PROGRAM = Path(__file__).parent / "programs" / "smolagents_lookup.py"
ROW = {"question": "What is the value of A?", "answer": "4133", "info": {"table": {"A": "4133", "B": "17"}}}
INITIAL_PLAN = "1. look up A\n2. answer with it"
UPDATED_PLAN = "1. answer with the value found"
SCRIPT = ServerScript(replies=[
    # smolagents' planning prompts end with these words (its prompt templates, unchanged)
    ScriptedReply(match=r"write your plan\.$", content=INITIAL_PLAN),
    ScriptedReply(match=r"write your new plan below\.$", content=UPDATED_PLAN),
    # the first action: after the first plan (planning on), or straight after the task (planning off)
    ScriptedReply(match=r"^Now proceed", turn=1, tool_calls=[ScriptedToolCall(name="lookup", arguments='{"key": "A"}')]),
    ScriptedReply(match=r"^New task", turn=0, tool_calls=[ScriptedToolCall(name="lookup", arguments='{"key": "A"}')]),
    ScriptedReply(tool_calls=[ScriptedToolCall(name="final_answer", arguments='{"answer": "4133"}')]),
])


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def _stdout_is_answer(state: dict[str, Any], answer: str, **_: Any) -> float:
    return float(state["agent"]["stdout"].strip() == answer)


def _env(python: Path, rows: list[dict[str, Any]], *args: str, **kw: Any) -> vf.AgentEnv:
    return vf.AgentEnv(command=[str(python), str(PROGRAM), *args], dataset=rows,
                       rubric=vf.Rubric(funcs=[_stdout_is_answer]), timeout_s=180, **kw)


async def test_planning_rewrites_the_history_call_by_call(smolagents_python: Path, prefix_of: Any) -> None:
    with ScriptedServer(SCRIPT) as srv:
        out = await _env(smolagents_python, [ROW]).a_generate([ROW], vf.make_client(base_url=srv.base_url), "policy")
    r = out.results[0]
    assert r.error is None, r.error
    assert r.stop_reason == "completed" and r.reward == 1.0 and r.state["agent"]["stdout"] == "4133\n"
    plan0, act1, plan2, act3 = srv.requests  # plan, act, re-plan, act (final_answer)

    # 0: the initial plan, a lone user message with the task; no tools, stops at <end_plan>
    assert [m["role"] for m in plan0["messages"]] == ["user"] and plan0["stop"] == ["<end_plan>"]
    assert "What is the value of A?" in _text(plan0["messages"][0]["content"]) and "tools" not in plan0
    # 1: an action: system prompt, task, the plan as an assistant message; a tool call is required
    assert [m["role"] for m in act1["messages"]] == ["system", "user", "assistant", "user"]
    assert INITIAL_PLAN in _text(act1["messages"][2]["content"]) and act1["tool_choice"] == "required"
    assert {t["function"]["name"] for t in act1["tools"]} == {"lookup", "final_answer"}
    # 2: the plan update: a new system prompt, the memory summarised (the tool call as text,
    #    the real tool's output as an observation), no earlier plan
    assert plan2["messages"][0]["role"] == "system" and "tools" not in plan2
    summary = [_text(m["content"]) for m in plan2["messages"]]
    assert summary[2].startswith("Calling tools:\n[{") and "'name': 'lookup'" in summary[2]
    assert summary[3].startswith("Observation:\n4133\n")  # lookup ran in the program, reading VF_INFO
    assert not any(INITIAL_PLAN in s for s in summary)
    # 3: the next action: call 1's messages, then the tool call rewritten as text, the observation, the new plan
    assert act3["messages"][:4] == act1["messages"]
    assert [m["role"] for m in act3["messages"][4:]] == ["assistant", "user", "assistant", "user"]
    assert _text(act3["messages"][5]["content"]) == "Observation:\n4133"
    assert UPDATED_PLAN in _text(act3["messages"][6]["content"])

    # Recorded ids are the server's (one per character), and the history is not one prefix:
    # no call extends an earlier call's prompt + completion. Call 3 starts with call 1's
    # prompt, but the tool call call 1 sampled comes back as different text.
    assert len(r.tokens) == 4
    for request, turn in zip(srv.requests, r.tokens, strict=True):
        assert turn.prompt_ids == [ord(c) for c in render_chat(request["messages"])[0]]
    t = r.tokens
    assert not any(prefix_of(t[j], t[i]) for j in range(4) for i in range(j))
    assert t[3].prompt_ids[: len(t[1].prompt_ids)] == t[1].prompt_ids
    assert not r.token_sequence().prefix_consistent
    # ...so the trainer trains it as 4 rows (none dropped), every sampled token exactly once
    rows = r.token_rows()
    assert len(rows) == 4 and sum(sum(row.completion_mask) for row in rows) == sum(len(x.completion_ids) for x in t)
    assert r.completion == [r.state["agent"]["calls"][3].reply]  # not one conversation: the last reply alone
    assert r.prompt == plan0["messages"]


async def test_without_planning_the_tool_call_still_comes_back_as_text(smolagents_python: Path,
                                                                      prefix_of: Any) -> None:
    with ScriptedServer(SCRIPT) as srv:
        env = _env(smolagents_python, [ROW], "--planning-interval", "0")
        out = await env.a_generate([ROW], vf.make_client(base_url=srv.base_url), "policy")
    r = out.results[0]
    assert r.error is None and r.state["agent"]["stdout"] == "4133\n" and r.reward == 1.0
    act0, act1 = srv.requests
    assert [m["role"] for m in act0["messages"]] == ["system", "user"]
    assert act1["messages"][:2] == act0["messages"]
    assert _text(act1["messages"][2]["content"]).startswith("Calling tools:\n[{")
    assert _text(act1["messages"][3]["content"]) == "Observation:\n4133"
    first, second = r.tokens
    assert second.prompt_ids[: len(first.prompt_ids)] == first.prompt_ids and not prefix_of(second, first)
    assert not r.token_sequence().prefix_consistent


async def test_tiny_model_ids_are_the_servers(smolagents_python: Path, tapped_tiny_client: Any,
                                              check_server_ids: Any, prefix_of: Any) -> None:
    client, tap = tapped_tiny_client
    env = _env(smolagents_python, [ROW], sampling_args={"max_tokens": 24, "temperature": 1.0})
    out = await env.a_generate([ROW], client, "tiny")
    check_server_ids(out.results, tap)
    r = out.results[0]
    calls = r.state["agent"]["calls"]
    # Random text is no tool call: smolagents records an error step and goes on (plan, act,
    # ...), then asks for a final answer without tools, prints it and exits 0. A crash on
    # some other random output would be recorded as AgentCrashedError, never raised.
    if r.state["agent"]["exit_code"] == 0:
        assert r.error is None and r.stop_reason == "completed"
    else:
        assert r.error is not None and r.error.type == "AgentCrashedError"
    assert len(calls) >= 2 and calls[0].tools is None and calls[1].tools is not None
    assert not prefix_of(r.tokens[1], r.tokens[0])  # the first action does not extend the plan call
    assert not r.token_sequence().prefix_consistent


async def test_a_call_budget_ends_the_real_program_as_data(smolagents_python: Path, tapped_tiny_client: Any,
                                                          check_server_ids: Any) -> None:
    client, tap = tapped_tiny_client
    env = _env(smolagents_python, [ROW], sampling_args={"max_tokens": 8}, max_calls=2)
    out = await env.a_generate([ROW], client, "tiny")
    r = out.results[0]
    # The third call is answered 400 "rollout stopped: ..."; smolagents gives up and exits 1.
    # The rollout ends as a budget stop, with the two calls it made, not as a crash.
    assert r.error is None and r.stop_reason == "max_turns"
    assert r.state["agent"]["exit_code"] == 1 and "rollout stopped: the call budget of 2" in r.state["agent"]["stderr"]
    assert check_server_ids(out.results, tap) == 2 and len(r.tokens) == 2
