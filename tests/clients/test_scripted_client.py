"""ScriptedClient: the in-process ChatClient for fast environment unit tests."""

from __future__ import annotations

import pytest

import verifiers as vf
from verifiers.testing import ScriptedClient, ScriptedReply, ScriptedToolCall, ServerScript


def add(a: int, b: int) -> int:
    """Add.

    Args:
        a: first
        b: second
    """
    return a + b


def correct(completion, answer) -> float:
    return float(completion[-1].get("content") == answer)


async def test_list_replies_in_order_last_repeats() -> None:
    client = ScriptedClient(["one", "two"])
    env = vf.SingleTurnEnv(dataset=[{"question": f"q{i}"} for i in range(3)])
    out = await env.a_evaluate(client, "m", max_concurrent=1)
    assert [c[-1]["content"] for c in out.completion] == ["one", "two", "two"]
    assert len(client.calls) == 3
    assert client.calls[0].model == "m"
    assert client.calls[0].prompt == [{"role": "user", "content": "q0"}]


def test_sync_evaluate_with_scripted_client() -> None:
    client = ScriptedClient(["x"])
    env = vf.SingleTurnEnv(dataset=[{"question": "q", "answer": "x"}], rubric=vf.Rubric(funcs=[correct]))
    assert env.evaluate(client, "m").reward == [1.0]
    assert env.evaluate(client, "m").reward == [1.0]


async def test_function_replies_see_the_prompt() -> None:
    def reply(messages):
        return messages[-1]["content"][::-1]

    client = ScriptedClient(reply)
    env = vf.SingleTurnEnv(dataset=[{"question": "abc", "answer": "cba"}], rubric=vf.Rubric(funcs=[correct]))
    out = await env.a_evaluate(client, "m")
    assert out.reward == [1.0]


async def test_exception_replies_become_rollout_errors() -> None:
    client = ScriptedClient([vf.OverlongPromptError("too long"), RuntimeError("boom"), "fine"])
    env = vf.SingleTurnEnv(dataset=[{"question": f"q{i}"} for i in range(3)])
    out = await env.a_evaluate(client, "m", max_concurrent=1)
    overlong, boom, fine = out.results
    assert overlong.stop_reason == "prompt_too_long" and overlong.error is None and overlong.is_truncated
    assert boom.stop_reason == "error" and boom.error.type == "RuntimeError"
    assert fine.error is None and fine.completion[-1]["content"] == "fine"


async def test_dict_replies_with_tool_calls_drive_tool_env() -> None:
    client = ScriptedClient(
        [
            {"content": None, "tool_calls": [{"name": "add", "arguments": '{"a": 20, "b": 22}'}]},
            {"content": "42"},
        ]
    )
    env = vf.ToolEnv(
        dataset=[{"question": "q", "answer": "42"}], tools=[add], rubric=vf.Rubric(funcs=[correct])
    )
    out = await env.a_evaluate(client, "m")
    r = out.results[0]
    assert r.error is None
    assert r.completion[1]["content"] == "42"
    assert r.completion[1]["tool_call_id"] == r.completion[0]["tool_calls"][0]["id"]
    assert r.reward == 1.0
    # Tools were passed to the client.
    assert client.calls[0].tools[0]["function"]["name"] == "add"
    assert len(r.tokens) == 2


async def test_token_ids_prefix_consistent_for_text_turns() -> None:
    class TwoTurn(vf.MultiTurnEnv):
        async def env_response(self, messages, state, **kwargs):
            return [{"role": "user", "content": "again"}]

    client = ScriptedClient(["first", "second"])
    env = TwoTurn(dataset=[{"question": "q"}], max_turns=2)
    out = await env.a_evaluate(client, "m")
    first, second = out.results[0].tokens
    prefix = first.prompt_ids + first.completion_ids
    assert second.prompt_ids[: len(prefix)] == prefix
    assert out.results[0].token_sequence().prefix_consistent


async def test_token_ids_prefix_consistent_for_tool_call_turns() -> None:
    client = ScriptedClient(
        [
            {"content": None, "tool_calls": [{"name": "add", "arguments": '{"a": 20, "b": 22}'}]},
            {"content": "42"},
        ]
    )
    env = vf.ToolEnv(dataset=[{"question": "q"}], tools=[add])
    out = await env.a_evaluate(client, "m")
    first, second = out.results[0].tokens
    prefix = first.prompt_ids + first.completion_ids
    assert second.prompt_ids[: len(prefix)] == prefix


async def test_finish_reason_length_from_dict_reply() -> None:
    client = ScriptedClient([{"content": "cut", "finish_reason": "length"}])
    env = vf.SingleTurnEnv(dataset=[{"question": "q"}])
    out = await env.a_evaluate(client, "m")
    assert out.results[0].stop_reason == "length"
    assert out.results[0].is_truncated


async def test_server_script_rules() -> None:
    script = ServerScript(
        replies=[
            ScriptedReply(
                match="weather", tool_calls=[ScriptedToolCall(name="add", arguments='{"a": 1, "b": 2}')]
            ),
            ScriptedReply(content="turn {turn}: {reversed_last_user}"),
        ]
    )
    client = ScriptedClient(script)
    env = vf.ToolEnv(dataset=[{"question": "weather?"}, {"question": "hello"}], tools=[add])
    out = await env.a_evaluate(client, "m")
    weather, hello = out.results
    assert weather.completion[0]["tool_calls"][0]["function"]["name"] == "add"
    assert weather.completion[1]["content"] == "3"
    assert weather.completion[-1]["content"] == "turn 1: ?rehtaew"
    assert hello.completion == [{"role": "assistant", "content": "turn 0: olleh"}]


async def test_server_script_context_length() -> None:
    client = ScriptedClient(ServerScript(context_length=10))
    env = vf.SingleTurnEnv(dataset=[{"question": "a much too long question"}])
    out = await env.a_evaluate(client, "m")
    assert out.stop_reason == ["prompt_too_long"]


async def test_completion_mode_with_scripted_client() -> None:
    client = ScriptedClient(lambda prompt: prompt.upper())
    env = vf.SingleTurnEnv(dataset=[{"question": "abc"}], message_type="completion")
    out = await env.a_evaluate(client, "m")
    assert out.completion == ["ABC"]
    assert client.calls[0].prompt == "abc"
    assert client.calls[0].tools is None


async def test_sampling_args_recorded() -> None:
    client = ScriptedClient(["ok"])
    env = vf.SingleTurnEnv(dataset=[{"question": "q"}], sampling_args={"temperature": 0.7})
    await env.a_evaluate(client, "m", sampling_args={"max_tokens": 5})
    # 0.1.x's default n=1 under the environment's, under the call's (an empty extra_body is not sent)
    assert client.calls[0].sampling_args == {"n": 1, "temperature": 0.7, "max_tokens": 5}


@pytest.mark.timeout(10)
async def test_latency_and_timeout_with_scripted_client() -> None:
    client = ScriptedClient(["slow"], latency_s=5)
    env = vf.SingleTurnEnv(dataset=[{"question": "q"}])
    out = await env.a_evaluate(client, "m", rollout_timeout_s=0.2)
    assert out.stop_reason == ["timeout"]
    assert out.results[0].error.type == "RolloutTimeoutError"
