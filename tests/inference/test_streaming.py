"""Streaming (server-sent events) for chat and completions, with the sync and async openai clients.

A streamed request must carry exactly what the same request without streaming returns:
same seed, same text, same tokens, and the finish reason on the last chunk.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import openai
import pytest

MODEL = "tiny"
MESSAGES = [{"role": "user", "content": "stream me"}]
SAMPLING: dict[str, Any] = {"temperature": 1.0, "seed": 21, "max_tokens": 20}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'


def collect_chat(chunks: Any) -> dict[str, Any]:
    """Concatenate chat chunks per choice: content, token ids, logprobs, finish reasons, usage."""
    out: dict[str, Any] = {
        "text": defaultdict(str), "ids": defaultdict(list), "lps": defaultdict(list), "finish": {},
        "tool_calls": defaultdict(list), "usage": None, "chunks": [],
    }
    for ch in chunks:
        out["chunks"].append(ch)
        if ch.usage is not None:
            out["usage"] = ch.usage
        for c in ch.choices:
            assert c.index not in out["finish"], "a chunk arrived after this choice finished"
            if c.delta.content:
                out["text"][c.index] += c.delta.content
            out["ids"][c.index] += list(getattr(c, "token_ids", None) or [])
            if c.logprobs and c.logprobs.content:
                out["lps"][c.index] += [e.logprob for e in c.logprobs.content]
            if c.delta.tool_calls:
                out["tool_calls"][c.index] += c.delta.tool_calls
            if c.finish_reason is not None:
                out["finish"][c.index] = c.finish_reason
    return out


def test_chat_stream_equals_the_non_streamed_response(client) -> None:
    extra = {"return_token_ids": True}
    whole = client.chat.completions.create(model=MODEL, messages=MESSAGES, logprobs=True, extra_body=extra, **SAMPLING)
    stream = client.chat.completions.create(model=MODEL, messages=MESSAGES, logprobs=True, extra_body=extra,
                                            stream=True, **SAMPLING)
    got = collect_chat(stream)
    choice = whole.choices[0]
    assert got["text"][0] == choice.message.content
    assert got["ids"][0] == list(choice.token_ids)
    assert got["lps"][0] == [e.logprob for e in choice.logprobs.content]
    assert got["finish"] == {0: choice.finish_reason}
    assert got["chunks"][0].choices[0].delta.role == "assistant"
    assert list(got["chunks"][0].prompt_token_ids) == list(whole.prompt_token_ids)
    last_with_choices = [ch for ch in got["chunks"] if ch.choices][-1]
    assert last_with_choices.choices[0].finish_reason == choice.finish_reason


async def test_async_chat_stream_equals_the_non_streamed_response(aclient) -> None:
    whole = await aclient.chat.completions.create(model=MODEL, messages=MESSAGES, **SAMPLING)
    stream = await aclient.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True, **SAMPLING)
    got = collect_chat([ch async for ch in stream])
    assert got["text"][0] == whole.choices[0].message.content
    assert got["finish"] == {0: whole.choices[0].finish_reason}


def test_include_usage_adds_a_final_usage_chunk(client) -> None:
    whole = client.chat.completions.create(model=MODEL, messages=MESSAGES, **SAMPLING)
    stream = client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True,
                                            stream_options={"include_usage": True}, **SAMPLING)
    chunks = list(stream)
    assert chunks[-1].choices == []
    assert chunks[-1].usage.model_dump(include={"prompt_tokens", "completion_tokens", "total_tokens"}) == \
        whole.usage.model_dump(include={"prompt_tokens", "completion_tokens", "total_tokens"})
    assert all(ch.usage is None for ch in chunks[:-1])


def test_no_usage_chunk_unless_asked(client) -> None:
    chunks = list(client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True, **SAMPLING))
    assert all(ch.usage is None for ch in chunks)


def test_stream_with_n_keeps_choices_apart(client) -> None:
    kw = {**SAMPLING, "n": 3}
    whole = client.chat.completions.create(model=MODEL, messages=MESSAGES, **kw)
    got = collect_chat(client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True, **kw))
    assert {i: got["text"][i] for i in range(3)} == {c.index: c.message.content for c in whole.choices}
    assert set(got["finish"]) == {0, 1, 2}


def test_stop_string_never_leaks_into_the_stream(client, running_prompt) -> None:
    text, _ = running_prompt
    messages = [{"role": "user", "content": text}]
    full = client.chat.completions.create(model=MODEL, messages=messages, temperature=0, max_tokens=24)
    body = full.choices[0].message.content
    stop = body[6:9]
    whole = client.chat.completions.create(model=MODEL, messages=messages, temperature=0, max_tokens=24, stop=stop)
    got = collect_chat(client.chat.completions.create(model=MODEL, messages=messages, temperature=0, max_tokens=24,
                                                      stop=stop, stream=True))
    assert got["text"][0] == whole.choices[0].message.content == body[: body.find(stop)]
    assert stop not in got["text"][0]
    assert got["finish"] == {0: "stop"}


def test_completions_stream_equals_the_non_streamed_response(client) -> None:
    kw = {"prompt": "complete me", **SAMPLING}
    whole = client.completions.create(model=MODEL, **kw)
    chunks = list(client.completions.create(model=MODEL, stream=True, **kw))
    assert "".join(c.choices[0].text for c in chunks) == whole.choices[0].text
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason
    assert all(c.choices[0].finish_reason is None for c in chunks[:-1])


async def test_async_completions_stream_with_logprobs_and_usage(aclient) -> None:
    kw = {"prompt": "complete me", "logprobs": 2, **SAMPLING}
    whole = await aclient.completions.create(model=MODEL, **kw)
    stream = await aclient.completions.create(model=MODEL, stream=True, stream_options={"include_usage": True}, **kw)
    chunks = [c async for c in stream]
    body = [c for c in chunks if c.choices]
    assert "".join(c.choices[0].text for c in body) == whole.choices[0].text
    lps = [lp for c in body for lp in c.choices[0].logprobs.token_logprobs]
    assert lps == whole.choices[0].logprobs.token_logprobs
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


# -- tool calls while streaming (scripted model output) ---------------------------------------
def scripted_stream(scripted: Any, reply: str, **kw: Any) -> dict[str, Any]:
    engine, client = scripted
    engine.reply = reply
    return collect_chat(client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True, **kw))


def test_streamed_tool_call_arrives_as_a_tool_call_delta(scripted) -> None:
    got = scripted_stream(scripted, "Checking." + CALL, tools=[WEATHER])
    assert got["text"][0] == "Checking."  # the call markup is never streamed as content
    (call,) = got["tool_calls"][0]
    assert call.index == 0 and call.id.startswith("call_") and call.type == "function"
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert got["finish"] == {0: "tool_calls"}


def test_streamed_malformed_call_is_plain_content(scripted) -> None:
    reply = '<tool_call>{"name": "get_weather", "arguments": {city}}</tool_call>'
    got = scripted_stream(scripted, reply, tools=[WEATHER])
    assert got["text"][0] == reply
    assert not got["tool_calls"][0]
    assert got["finish"] == {0: "stop"}


def test_streamed_text_that_only_looks_like_a_tag_is_released(scripted) -> None:
    reply = "a < b and <tool is not a call"
    got = scripted_stream(scripted, reply, tools=[WEATHER])
    assert got["text"][0] == reply
    assert got["finish"] == {0: "stop"}


def test_stream_errors_before_the_first_byte_are_http_errors(client) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True, max_tokens=10**7)
    assert "maximum context length" in err.value.message
