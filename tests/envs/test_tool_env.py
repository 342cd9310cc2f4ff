"""ToolEnv / StatefulToolEnv with real Python functions, scripted tool calls over HTTP."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

import verifiers as vf
from verifiers.testing import ScriptedReply, ScriptedServer, ScriptedToolCall, ServerScript


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


def shout(text: str) -> str:
    """Upper-case a text.

    Args:
        text: What to shout.
    """
    return text.upper()


def explode(x: int) -> int:
    """Always fails.

    Args:
        x: Ignored.
    """
    raise ValueError(f"kaboom {x}")


async def slow(seconds: float) -> str:
    """Sleep a while.

    Args:
        seconds: How long.
    """
    await asyncio.sleep(seconds)
    return "done"


def call(name: str, arguments: str = "{}", content: str | None = None, **kw) -> ScriptedReply:
    return ScriptedReply(content=content, tool_calls=[ScriptedToolCall(name=name, arguments=arguments)], **kw)


def script(*first_turn_calls: ScriptedReply, final: str = "The answer is {last_message}") -> ServerScript:
    """Turn 0: the given tool-calling reply; afterwards: a plain answer quoting the last tool message."""
    replies = [r.model_copy(update={"turn": 0}) for r in first_turn_calls]
    return ServerScript(replies=[*replies, ScriptedReply(content=final)])


DATA = [{"question": "What is 2+3?", "answer": "5"}]


async def test_schema_sent_and_tool_call_executed(server: ScriptedServer, client) -> None:
    server.set_script(script(call("add", '{"a": 2, "b": 3}')))
    env = vf.ToolEnv(dataset=DATA, tools=[add, shout], max_turns=5)
    out = await env.a_evaluate(client, "m")
    r = out.results[0]
    assert r.error is None
    assert r.stop_reason == "completed"

    tools = server.requests[0]["tools"]
    assert [t["function"]["name"] for t in tools] == ["add", "shout"]
    add_schema = tools[0]["function"]
    assert add_schema["parameters"]["properties"]["a"]["type"] == "integer"
    assert add_schema["parameters"]["required"] == ["a", "b"]
    assert "Add two integers" in add_schema["description"]
    assert server.requests[-1]["tools"] == tools

    assistant, tool_msg, final = r.completion
    assert assistant["role"] == "assistant"
    tc = assistant["tool_calls"][0]
    assert tc["function"] == {"name": "add", "arguments": '{"a": 2, "b": 3}'}
    assert tool_msg == {"role": "tool", "content": "5", "tool_call_id": tc["id"]}
    # Episode ends when the assistant answers without tool calls.
    assert final == {"role": "assistant", "content": "The answer is 5"}
    assert r.turns == 2
    assert "tool_errors" not in r.state
    # The server received the tool message with the same id.
    sent = server.requests[-1]["messages"]
    assert sent[-1] == tool_msg
    assert sent[-2]["tool_calls"][0]["id"] == tc["id"]


async def test_several_tool_calls_in_one_turn(server: ScriptedServer, client) -> None:
    multi = ScriptedReply(
        turn=0,
        tool_calls=[
            ScriptedToolCall(name="add", arguments='{"a": 1, "b": 1}'),
            ScriptedToolCall(name="shout", arguments='{"text": "hi"}'),
        ],
    )
    server.set_script(ServerScript(replies=[multi, ScriptedReply(content="ok")]))
    env = vf.ToolEnv(dataset=DATA, tools=[add, shout])
    out = await env.a_evaluate(client, "m")
    r = out.results[0]
    ids = [tc["id"] for tc in r.completion[0]["tool_calls"]]
    assert [m["tool_call_id"] for m in r.completion[1:3]] == ids
    assert [m["content"] for m in r.completion[1:3]] == ["2", "HI"]


@pytest.mark.parametrize(
    ("reply", "expected_in_error", "error_type"),
    [
        (call("add", '{"a": 2, "b": '), "not valid JSON", "ToolArgumentsError"),
        (call("nope", "{}"), "Available tools: add, explode, shout, slow", "ToolNotFoundError"),
        (call("explode", '{"x": 7}'), "kaboom 7", "ToolExecutionError"),
        (call("add", '{"a": 1}'), "missing required argument(s): b", "ToolArgumentsError"),
    ],
    ids=["malformed-json", "unknown-tool", "tool-raises", "missing-arg"],
)
async def test_tool_failures_become_tool_messages(
    server: ScriptedServer, client, reply, expected_in_error, error_type
) -> None:
    server.set_script(script(reply, final="recovered"))
    env = vf.ToolEnv(dataset=DATA, tools=[add, explode, shout, slow], max_turns=5)
    out = await env.a_evaluate(client, "m")
    r = out.results[0]
    # A bad tool call never ends the rollout: the model gets the error and another turn.
    assert r.error is None
    assert r.stop_reason == "completed"
    tool_msg = r.completion[1]
    assert tool_msg["role"] == "tool"
    assert tool_msg["tool_call_id"] == r.completion[0]["tool_calls"][0]["id"]
    assert tool_msg["content"].startswith("Error:")
    assert expected_in_error in tool_msg["content"]
    assert r.completion[-1] == {"role": "assistant", "content": "recovered"}
    errors = r.state["tool_errors"]
    assert len(errors) == 1
    assert errors[0].type == error_type
    assert errors[0].where == "tool"
    # The model saw the error message.
    assert server.requests[-1]["messages"][-1]["content"] == tool_msg["content"]


async def test_tool_timeout(server: ScriptedServer, client) -> None:
    server.set_script(script(call("slow", '{"seconds": 5}'), final="gave up"))
    env = vf.ToolEnv(dataset=DATA, tools=[slow], tool_timeout_s=0.2)
    t0 = time.perf_counter()
    out = await env.a_evaluate(client, "m")
    assert time.perf_counter() - t0 < 3
    r = out.results[0]
    assert r.error is None
    assert r.completion[1]["content"].startswith("Error:")
    assert "timed out" in r.completion[1]["content"]
    assert r.state["tool_errors"][0].type == "ToolTimeoutError"
    assert r.completion[-1]["content"] == "gave up"


async def test_custom_error_formatter(server: ScriptedServer, client) -> None:
    server.set_script(script(call("explode", '{"x": 1}'), final="ok"))
    env = vf.ToolEnv(
        dataset=DATA, tools=[explode], error_formatter=lambda e: f"TOOL FAILED <{type(e).__name__}>"
    )
    out = await env.a_evaluate(client, "m")
    assert out.results[0].completion[1]["content"] == "TOOL FAILED <ValueError>"  # the tool's own exception


async def test_max_turns_with_endless_tool_calls(server: ScriptedServer, client) -> None:
    server.set_script(ServerScript(replies=[call("add", '{"a": 1, "b": 2}')]))
    env = vf.ToolEnv(dataset=DATA, tools=[add], max_turns=3)
    out = await env.a_evaluate(client, "m")
    r = out.results[0]
    assert r.stop_reason == "max_turns"
    assert r.turns == 3
    assert server.n_requests == 3
    assert r.error is None


async def test_tool_rubric_counts_calls(server: ScriptedServer, client) -> None:
    turn0 = ScriptedReply(
        turn=0,
        tool_calls=[
            ScriptedToolCall(name="add", arguments='{"a": 1, "b": 1}'),
            ScriptedToolCall(name="shout", arguments='{"text": "x"}'),
        ],
    )
    turn1 = call("add", '{"a": 2, "b": 2}', turn=1)
    server.set_script(ServerScript(replies=[turn0, turn1, ScriptedReply(content="done")]))
    env = vf.ToolEnv(dataset=DATA, tools=[add, shout], rubric=vf.ToolRubric(tools=[add, shout]))
    out = await env.a_evaluate(client, "m")
    r = out.results[0]
    assert r.metrics == {"total_tool_calls": 3.0, "add_calls": 2.0, "shout_calls": 1.0}
    assert r.reward == 0.0  # weight 0 by default: metrics only


# -- StatefulToolEnv ------------------------------------------------------------------------


def lookup(key: str, secret: str) -> str:
    """Look up a key in the session store.

    Args:
        key: The key.
        secret: Session secret (injected by the environment).
    """
    return f"{key}@{secret}"


class NamedStyleEnv(vf.StatefulToolEnv):
    """Later 0.1.x style: (tool_name, tool_args, messages, state, **kwargs)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.add_tool(lookup, args_to_skip=["secret"])
        self.seen_names: list[str] = []

    async def setup_state(self, state, **kwargs):
        state["secret"] = f"S{state['example_id']}"
        return state

    def update_tool_args(self, tool_name, tool_args, messages, state, **kwargs):
        self.seen_names.append(tool_name)
        if tool_name == "lookup":
            tool_args["secret"] = state["secret"]
        return tool_args


class ArgsStyleEnv(vf.StatefulToolEnv):
    """Earlier 0.1.x style: (tool_args, messages, state, **kwargs)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.add_tool(lookup, args_to_skip=["secret"])

    async def setup_state(self, state, **kwargs):
        state["secret"] = f"S{state['example_id']}"
        return state

    async def update_tool_args(self, tool_args, messages, state, **kwargs):
        return {**tool_args, "secret": state["secret"]}


@pytest.mark.parametrize("env_cls", [NamedStyleEnv, ArgsStyleEnv])
async def test_stateful_tool_env_injects_hidden_args(server: ScriptedServer, client, env_cls) -> None:
    server.set_script(script(call("lookup", '{"key": "k1"}'), final="{last_message}"))
    env = env_cls(dataset=[{"question": "a"}, {"question": "b"}], tools=[add])
    out = await env.a_evaluate(client, "m")
    schemas = {t["function"]["name"]: t["function"] for t in server.requests[0]["tools"]}
    assert set(schemas) == {"add", "lookup"}
    assert "secret" not in schemas["lookup"]["parameters"]["properties"]
    assert schemas["lookup"]["parameters"]["required"] == ["key"]
    for i, r in enumerate(out.results):
        assert r.error is None
        assert "tool_errors" not in r.state, r.state.get("tool_errors")
        assert r.completion[1]["content"] == f"k1@S{i}"
        assert r.completion[-1]["content"] == f"k1@S{i}"
    if env_cls is NamedStyleEnv:
        assert env.seen_names == ["lookup", "lookup"]


async def test_stateful_model_cannot_override_hidden_arg(server: ScriptedServer, client) -> None:
    server.set_script(script(call("lookup", '{"key": "k", "secret": "HACKED"}'), final="x"))
    env = ArgsStyleEnv(dataset=[{"question": "a"}])
    out = await env.a_evaluate(client, "m")
    assert out.results[0].completion[1]["content"] == "k@S0"


async def test_stateful_without_injection_reports_missing_arg(server: ScriptedServer, client) -> None:
    class Forgetful(vf.StatefulToolEnv):
        pass

    env = Forgetful(dataset=[{"question": "a"}])
    env.add_tool(lookup, args_to_skip=["secret"])
    server.set_script(script(call("lookup", '{"key": "k"}'), final="x"))
    out = await env.a_evaluate(client, "m")
    r = out.results[0]
    assert r.error is None
    assert r.completion[1]["content"].startswith("Error:")
    assert "secret" in r.completion[1]["content"]


def test_remove_tool_updates_schema() -> None:
    env = vf.ToolEnv(dataset=DATA, tools=[add, shout])
    env.remove_tool("add")
    assert [t["function"]["name"] for t in env.oai_tools] == ["shout"]
    assert list(env.tool_map) == ["shout"]
    json.dumps(env.oai_tools)
