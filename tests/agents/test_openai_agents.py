"""An unmodified OpenAI Agents SDK program (openai-agents 0.24.0, from PyPI) as an `AgentEnv` rollout.

The program (programs/openai_agents_calc.py) runs in its own venv with a function tool and
``mcp-server-calculator`` over stdio. Against `ScriptedServer` every call is checked: the
scripted tool calls are executed by the real program (the function tool reads VF_INFO, the
calculator is a real MCP server process), their results reach the next call, and the program
prints the final answer. Against the embedded server with a tiny random model, the recorded
token ids must be the server's own, and whatever the program makes of random text is data.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import verifiers as vf
from verifiers.testing import ScriptedReply, ScriptedServer, ScriptedToolCall, ServerScript
from verifiers.testing.script import render_chat

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # the first run builds the venv (20-60 s here)

PROGRAM = Path(__file__).parent / "programs" / "openai_agents_calc.py"
INSTRUCTIONS = ("Answer the task. Use `lookup` to read values from the task's table and `calculate` for "
                "arithmetic. Reply with the final number only.")
ROW = {"question": "What is A times 7?", "answer": "28931", "info": {"table": {"A": "4133", "B": "17"}}}


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def _processes_of(python: Path) -> list[str]:
    """Command lines of running processes started with ``python`` (this venv's interpreter)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:  # ended while we looked
            continue
        if argv and argv[0] == str(python).encode():
            found.append(" ".join(a.decode(errors="replace") for a in argv))
    return found


def _stdout_is_answer(state: dict[str, Any], answer: str, **_: Any) -> float:
    return float(state["agent"]["stdout"].strip() == answer)


def _env(python: Path, rows: list[dict[str, Any]], **kw: Any) -> vf.AgentEnv:
    return vf.AgentEnv(command=[str(python), str(PROGRAM)], dataset=rows, rubric=vf.Rubric(funcs=[_stdout_is_answer]),
                       timeout_s=180, **kw)


async def test_function_tool_and_mcp_calculator_run_for_real_call_by_call(openai_agents_python: Path) -> None:
    script = ServerScript(replies=[
        ScriptedReply(turn=0, tool_calls=[ScriptedToolCall(name="lookup", arguments='{"key": "A"}')]),
        ScriptedReply(turn=1, tool_calls=[ScriptedToolCall(name="calculate", arguments='{"expression": "4133*7"}')]),
        ScriptedReply(content="{last_message}"),  # echoes the calculator's answer: only the MCP server knows it
    ])
    with ScriptedServer(script) as srv:
        out = await _env(openai_agents_python, [ROW]).a_generate([ROW], vf.make_client(base_url=srv.base_url), "policy")
    r = out.results[0]
    assert r.error is None, r.error
    assert r.stop_reason == "completed" and r.reward == 1.0
    assert r.state["agent"]["exit_code"] == 0 and r.state["agent"]["stdout"] == "28931\n"

    sent = srv.requests
    assert len(sent) == 3 and r.state["agent"]["num_calls"] == 3
    first = sent[0]
    assert first["model"] == "policy"
    assert first["messages"] == [{"role": "system", "content": INSTRUCTIONS},
                                 {"role": "user", "content": "What is A times 7?"}]
    tools = {t["function"]["name"]: t["function"] for t in first["tools"]}
    assert set(tools) == {"lookup", "calculate"}
    assert tools["calculate"]["description"] == "Calculates/evaluates the given expression."  # listed by the MCP server
    # call 1: the SDK ran the function tool (it read the table from VF_INFO)
    assert sent[1]["messages"][-2]["tool_calls"][0]["function"]["name"] == "lookup"
    assert sent[1]["messages"][-1]["role"] == "tool" and _text(sent[1]["messages"][-1]["content"]) == "4133"
    # call 2: the calculator MCP server evaluated the expression
    assert sent[2]["messages"][-2]["tool_calls"][0]["function"]["arguments"] == '{"expression": "4133*7"}'
    assert sent[2]["messages"][-1]["role"] == "tool" and _text(sent[2]["messages"][-1]["content"]) == "28931"

    # Recorded ids are the server's: one id per character of what it was sent and what it said.
    assert len(r.tokens) == 3
    for request, turn in zip(sent, r.tokens, strict=True):
        assert turn.prompt_ids == [ord(c) for c in render_chat(request["messages"])[0]]
    assert r.tokens[2].completion_ids == [ord(c) for c in "28931"]
    # The Agents SDK resends the whole conversation each turn: one linear history, one training row.
    assert r.token_sequence().prefix_consistent
    assert r.completion[-1] == {"role": "assistant", "content": "28931"}
    # Neither the program nor the MCP server it started outlives the rollout.
    assert _processes_of(openai_agents_python) == []


async def test_tool_errors_reach_the_model_and_a_crash_is_data(openai_agents_python: Path) -> None:
    rows = [{"question": "divide 1 by 0", "answer": "", "info": {}},
            {"question": "call a mystery tool", "answer": "", "info": {}}]
    script = ServerScript(replies=[
        ScriptedReply(turn=0, match="divide", tool_calls=[ScriptedToolCall(name="calculate",
                                                                           arguments='{"expression": "1/0"}')]),
        ScriptedReply(turn=0, match="mystery", tool_calls=[ScriptedToolCall(name="no_such_tool")]),
        ScriptedReply(content="{last_message}"),
    ])
    with ScriptedServer(script) as srv:
        out = await _env(openai_agents_python, rows).a_generate(rows, vf.make_client(base_url=srv.base_url), "policy")
    divided, mystery = out.results
    # The MCP server's error is a tool message the model reads; the program goes on and finishes.
    assert divided.error is None and divided.state["agent"]["exit_code"] == 0
    error_text = "Error executing tool calculate: division by zero"
    assert _text(divided.state["agent"]["calls"][1].messages[-1]["content"]) == error_text
    assert divided.state["agent"]["stdout"].strip() == error_text
    # A tool the agent does not have: the SDK raises ModelBehaviorError and the program dies.
    assert mystery.error is not None and mystery.error.type == "AgentCrashedError"
    assert "after 1 model call" in mystery.error.message
    assert "Tool no_such_tool not found" in mystery.error.message  # the stderr tail, for the reader
    assert mystery.stop_reason == "error" and mystery.state["agent"]["exit_code"] == 1
    assert len(mystery.tokens) == 1  # the call it made before dying is kept


async def test_tiny_model_ids_are_the_servers(openai_agents_python: Path, tapped_tiny_client: Any,
                                              check_server_ids: Any) -> None:
    client, tap = tapped_tiny_client
    rows = [ROW, {**ROW, "question": "What is B times 3?", "answer": "51"}]
    env = _env(openai_agents_python, rows, sampling_args={"max_tokens": 24, "temperature": 1.0})
    out = await env.a_generate(rows, client, "tiny")
    assert check_server_ids(out.results, tap) >= 2
    for r in out.results:
        agent = r.state["agent"]
        assert agent["num_calls"] >= 1 and not agent["timed_out"]
        first = agent["calls"][0]
        assert {t["function"]["name"] for t in first.tools} == {"lookup", "calculate"}  # the MCP server was up
        # Random text is the model's answer (the program prints it) or a tool call the SDK
        # rejects (the program exits non-zero): either way a result, never an exception.
        if agent["exit_code"] == 0:
            assert r.error is None and r.stop_reason == "completed"
            assert agent["stdout"].strip() == (r.completion[-1]["content"] or "").strip()
        else:
            assert r.error is not None and r.error.type == "AgentCrashedError" and r.stop_reason == "error"
