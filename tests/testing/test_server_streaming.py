"""The scripted server streams chat completions the way OpenAI-compatible servers do, so streaming
clients (SDK agents, verifiers v1's chat harness) can be tested offline."""

from __future__ import annotations

import openai
import pytest

from verifiers.testing import ScriptedReply, ScriptedServer, ScriptedToolCall, ServerScript


def test_the_official_client_accumulates_content_tool_calls_and_usage() -> None:
    script = ServerScript(replies=[
        ScriptedReply(turn=0, content="Let me look that up for you.",
                      tool_calls=[ScriptedToolCall(name="lookup", arguments='{"key": "A", "why": "the user asked"}')]),
        ScriptedReply(content="A is {last_message}"),
    ])
    with ScriptedServer(script) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0)
        messages = [{"role": "user", "content": "look up A"}]
        chunks = list(client.chat.completions.create(model="m", messages=messages, stream=True,
                                                     stream_options={"include_usage": True}))
        with client.chat.completions.stream(model="m", messages=messages) as stream:  # the SDK's accumulator
            final = stream.get_final_completion()
        follow = client.chat.completions.create(model="m", stream=True, messages=[
            *messages, final.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": final.choices[0].message.tool_calls[0].id, "content": "42"}])
        text = "".join(c.choices[0].delta.content or "" for c in follow if c.choices)
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content == "Let me look that up for you." and sum(1 for c in chunks if c.choices
                                                                and c.choices[0].delta.content) > 1
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0  # include_usage: a last chunk
    call = final.choices[0].message.tool_calls[0]
    assert (call.function.name, call.function.arguments) == ("lookup", '{"key": "A", "why": "the user asked"}')
    assert final.choices[0].message.content == "Let me look that up for you."
    assert text == "A is 42"


def test_several_choices_stream_under_their_index_and_a_cut_reply_says_length() -> None:
    with ScriptedServer(ServerScript(replies=[ScriptedReply(content="abcdefghijklmnopqrstuvwxyz")])) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0)
        chunks = list(client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}],
                                                     stream=True, n=2, max_tokens=10))
    by_index: dict[int, str] = {}
    finish: dict[int, str] = {}
    for c in chunks:
        for ch in c.choices:
            by_index[ch.index] = by_index.get(ch.index, "") + (ch.delta.content or "")
            if ch.finish_reason:
                finish[ch.index] = ch.finish_reason
    assert by_index == {0: "abcdefghij", 1: "abcdefghij"} and finish == {0: "length", 1: "length"}


def test_text_completions_still_refuse_stream() -> None:
    with ScriptedServer() as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0)
        with pytest.raises(openai.BadRequestError, match="streams chat completions only"):
            list(client.completions.create(model="m", prompt="hi", stream=True))
