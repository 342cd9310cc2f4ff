"""Environments tested with ``unittest.mock`` clients, exactly as 0.1.x authors wrote such tests.

verifiers 0.1.5 (``envs/environment.py`` ``get_model_response``, ``envs/multiturn_env.py``
``rollout``) read a response only by attribute access:
``response.choices[0].message.content``, ``.message.tool_calls``, ``.finish_reason``, so a
``MagicMock`` with those attributes set was a complete response. It called
``client.chat.completions.create(model=..., messages=..., **sampling_args)`` with
``max_tokens`` renamed to ``max_completion_tokens`` in chat mode, and
``client.completions.create(model=..., prompt=...)`` in completion mode.
"""

from __future__ import annotations

import json
from unittest.mock import AsyncMock, MagicMock

import pytest

import verifiers as vf

ROWS = [{"question": "2+2", "answer": "4"}, {"question": "3+3", "answer": "6"}]


def correct(completion, answer) -> float:
    return 1.0 if completion[-1]["content"] == answer else 0.0


def chat_response(content: str | None, finish_reason: str = "stop", tool_calls: list | None = None) -> MagicMock:
    """What 0.1.x test suites build: a MagicMock with only the attributes the loop reads."""
    response = MagicMock()
    response.choices = [MagicMock()]
    response.choices[0].message.content = content
    response.choices[0].message.tool_calls = tool_calls
    response.choices[0].finish_reason = finish_reason
    return response


def tool_call(call_id: str, name: str, arguments: dict) -> MagicMock:
    call = MagicMock()
    call.id = call_id
    call.type = "function"
    call.function.name = name
    call.function.arguments = json.dumps(arguments)
    return call


def env() -> vf.SingleTurnEnv:
    return vf.SingleTurnEnv(dataset=[dict(r) for r in ROWS], rubric=vf.Rubric(funcs=[correct]))


def test_magicmock_client_with_a_sync_create() -> None:
    client = MagicMock()
    client.chat.completions.create.side_effect = [chat_response("4"), chat_response("5")]
    out = env().generate(env().dataset, client, "test-model", sampling_args={"max_tokens": 8, "temperature": 0.5})
    assert [c[-1]["content"] for c in out.completion] == ["4", "5"]
    assert out.reward == [1.0, 0.0]
    assert all(r.error is None for r in out.results)
    kwargs = client.chat.completions.create.call_args_list[0].kwargs
    assert kwargs["model"] == "test-model"
    assert kwargs["messages"] == [{"role": "user", "content": "2+2"}]
    # 0.1.5 get_model_response: chat mode sends max_completion_tokens, never max_tokens
    assert kwargs["max_completion_tokens"] == 8 and "max_tokens" not in kwargs
    assert kwargs["temperature"] == 0.5 and kwargs["n"] == 1


async def test_asyncmock_client_exactly_as_authors_write_it() -> None:
    client = AsyncMock()
    client.chat.completions.create.return_value = chat_response("4")
    out = await env().a_generate(env().dataset, client, "m")
    assert out.reward == [1.0, 0.0]
    assert client.chat.completions.create.await_count == 2
    state = out.state[0]
    # 0.1.5 kept the response objects; they read like the SDK's
    assert state["responses"][0].choices[0].message.content == "4"
    assert state["turn"] == 1


async def test_a_mock_response_with_unset_fields_is_not_an_empty_response() -> None:
    """Only content set: finish_reason, usage, tool_calls, logprobs are unset mocks and read as absent."""
    response = MagicMock()
    response.choices[0].message.content = "4"  # choices itself never assigned: indexing a MagicMock
    client = AsyncMock()
    client.chat.completions.create.return_value = response
    out = await env().a_generate(env().dataset[:1], client, "m")
    assert out.results[0].error is None
    assert out.completion[0] == [{"role": "assistant", "content": "4"}]
    assert out.results[0].stop_reason == "completed"


async def test_finish_reason_length_and_usage_read_from_attributes() -> None:
    response = chat_response("4", finish_reason="length")
    response.usage.prompt_tokens = 11
    response.usage.completion_tokens = 3
    client = AsyncMock()
    client.chat.completions.create.return_value = response
    out = await env().a_generate(env().dataset[:1], client, "m")
    state = out.state[0]
    assert state["is_truncated"] is True and out.results[0].stop_reason == "length"
    assert (state["usage"].prompt_tokens, state["usage"].completion_tokens) == (11, 3)


async def test_tool_calls_from_a_mock_reach_the_tool_and_the_transcript() -> None:
    calls = []

    def add(a: int, b: int) -> int:
        """Add two integers."""
        calls.append((a, b))
        return a + b

    tool_env = vf.ToolEnv(dataset=[dict(ROWS[0])], tools=[add], rubric=vf.Rubric(funcs=[correct]), max_turns=4)
    client = AsyncMock()
    client.chat.completions.create.side_effect = [
        chat_response(None, "tool_calls", [tool_call("call_1", "add", {"a": 2, "b": 2})]),
        chat_response("4"),
    ]
    out = await tool_env.a_generate(tool_env.dataset, client, "m")
    assert calls == [(2, 2)]
    completion = out.completion[0]
    assert [m["role"] for m in completion] == ["assistant", "tool", "assistant"]
    assert completion[0]["tool_calls"][0]["function"] == {"name": "add", "arguments": '{"a": 2, "b": 2}'}
    assert completion[0]["content"] == ""  # 0.1.x: a tool-calls-only reply has empty-string content
    assert completion[1] == {"role": "tool", "content": "4", "tool_call_id": "call_1"}
    assert out.reward == [1.0]
    # the tools went to create as 0.1.5 sent them
    assert client.chat.completions.create.call_args_list[0].kwargs["tools"][0]["function"]["name"] == "add"


async def test_completion_mode_calls_completions_create() -> None:
    response = MagicMock()
    response.choices = [MagicMock()]
    response.choices[0].text = " 4"
    response.choices[0].finish_reason = "stop"
    client = AsyncMock()
    client.completions.create.return_value = response
    completion_env = vf.SingleTurnEnv(
        dataset=[{"prompt": "2+2 =", "answer": " 4"}], message_type="completion", rubric=vf.Rubric(funcs=[])
    )
    out = await completion_env.a_generate(completion_env.dataset, client, "m", sampling_args={"max_tokens": 4})
    assert out.completion == [" 4"]
    kwargs = client.completions.create.call_args.kwargs
    assert kwargs["prompt"] == "2+2 =" and kwargs["max_tokens"] == 4  # completion mode keeps max_tokens
    assert out.state[0]["responses_start_idx"] == [0]


@pytest.mark.parametrize("returned", ["nothing", "none"])
async def test_a_mock_without_choices_is_recorded_as_an_empty_response(returned: str) -> None:
    client = AsyncMock()
    client.chat.completions.create.return_value = MagicMock() if returned == "nothing" else None
    out = await env().a_generate(env().dataset[:1], client, "m")
    assert out.results[0].error is not None
    assert out.results[0].error.type == "EmptyResponseError"
