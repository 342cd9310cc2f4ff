"""The streaming wire format stays exactly OpenAI's, however the server batches and renders chunks.

The server writes every delta the engine had ready for a stream at once, merges a row's deltas
that arrived together into one chunk (as vLLM does), and renders the common chunk from a
pre-built prefix instead of ``json.dumps``. These tests read the raw bytes: every event is
``data: {...}\\n\\n``, the stream ends with exactly one ``data: [DONE]``, chunk shapes are OpenAI's,
the fast rendering is byte-identical to ``json.dumps``, and a streamed request carries exactly the
tokens of the same request without streaming.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from typing import Any

import pytest

from verifiers.inference.engine import StreamDelta
from verifiers.inference.engine.sampling import SamplingParams
from verifiers.inference.server.sse import ChunkWriter, merge_deltas

MODEL = "tiny"
MESSAGES = [{"role": "user", "content": "stream me"}]
SAMPLING: dict[str, Any] = {"temperature": 1.0, "seed": 5, "max_tokens": 24}
TEXTS = ["plain", "", 'quo"te \\ back', "new\nline\ttab", "ctrl \x00\x01\x1f", "ünïcödé 中文 🙂", "</script>"]


def raw_stream(base_url: str, path: str, body: dict[str, Any]) -> list[str]:
    """POST ``body`` with ``stream: true`` and return the raw SSE events (the text between blank lines)."""
    req = urllib.request.Request(f"{base_url}{path}", data=json.dumps({**body, "stream": True}).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=60) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        raw = resp.read().decode()
    assert raw.endswith("\n\n"), "every event ends with a blank line"
    return raw[:-2].split("\n\n")


def parse_events(events: list[str], obj: str) -> list[dict[str, Any]]:
    """Check the framing and the fields every chunk has; the JSON chunks, [DONE] removed."""
    assert all(e.startswith("data: ") for e in events), events
    assert events[-1] == "data: [DONE]"
    assert [e for e in events if e == "data: [DONE]"] == ["data: [DONE]"]
    chunks = [json.loads(e[len("data: "):]) for e in events[:-1]]
    assert len({(c["id"], c["created"], c["model"]) for c in chunks}) == 1, "one id, created and model per stream"
    for c in chunks:
        assert c["object"] == obj and c["model"] == MODEL and isinstance(c["created"], int)
        assert list(c)[:5] == ["id", "object", "created", "model", "choices"]
    return chunks


def test_chat_wire_format_and_token_counts_match_the_non_streamed_request(server, client) -> None:
    extra = {"return_token_ids": True}
    whole = client.chat.completions.create(model=MODEL, messages=MESSAGES, n=2, extra_body=extra, **SAMPLING)
    events = raw_stream(server.base_url, "/chat/completions",
                        {"model": MODEL, "messages": MESSAGES, "n": 2, "stream_options": {"include_usage": True},
                         **extra, **SAMPLING})
    chunks = parse_events(events, "chat.completion.chunk")
    assert chunks[0]["choices"] == [
        {"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
        for i in range(2)
    ]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == whole.usage.completion_tokens
    ids: dict[int, list[int]] = {0: [], 1: []}
    text: dict[int, str] = {0: "", 1: ""}
    finish: dict[int, str] = {}
    for c in chunks[1:-1]:
        assert len(c["choices"]) == 1, "one choice per chunk"
        (ch,) = c["choices"]
        assert set(ch) <= {"index", "delta", "logprobs", "finish_reason", "stop_reason", "token_ids"}
        assert set(ch["delta"]) <= {"content", "tool_calls"} and ch["index"] not in finish
        ids[ch["index"]] += ch["token_ids"]
        text[ch["index"]] += ch["delta"].get("content", "")
        if ch["finish_reason"] is not None:
            finish[ch["index"]] = ch["finish_reason"]
    for choice in whole.choices:
        assert ids[choice.index] == list(choice.token_ids)
        assert text[choice.index] == choice.message.content
        assert finish[choice.index] == choice.finish_reason


def test_plain_chat_chunks_carry_one_content_delta(server, client) -> None:
    """The fast-rendered chunk (no logprobs, no token ids) has OpenAI's exact shape."""
    whole = client.chat.completions.create(model=MODEL, messages=MESSAGES, **SAMPLING)
    chunks = parse_events(raw_stream(server.base_url, "/chat/completions",
                                     {"model": MODEL, "messages": MESSAGES, **SAMPLING}), "chat.completion.chunk")
    body = chunks[1:]
    for c in body[:-1]:
        assert c["choices"] == [{"index": 0, "delta": {"content": c["choices"][0]["delta"]["content"]},
                                 "logprobs": None, "finish_reason": None}]
        assert c["choices"][0]["delta"]["content"]
    assert body[-1]["choices"][0]["finish_reason"] == whole.choices[0].finish_reason
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in body) == whole.choices[0].message.content


def test_completions_wire_format_matches_the_non_streamed_request(server, client) -> None:
    kw = {"model": MODEL, "prompt": "count with me", **SAMPLING}
    whole = client.completions.create(**kw)
    chunks = parse_events(raw_stream(server.base_url, "/completions",
                                     {**kw, "stream_options": {"include_usage": True}}), "text_completion")
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == whole.usage.completion_tokens
    body = chunks[:-1]
    for c in body:
        (ch,) = c["choices"]
        assert list(ch) == ["index", "text", "logprobs", "finish_reason", "stop_reason"]
    assert [c["choices"][0]["finish_reason"] for c in body][-1] == whole.choices[0].finish_reason
    assert all(c["choices"][0]["finish_reason"] is None for c in body[:-1])
    assert "".join(c["choices"][0]["text"] for c in body) == whole.choices[0].text


@pytest.mark.parametrize("text", TEXTS)
def test_fast_chunks_are_byte_identical_to_json_dumps(text: str) -> None:
    w = ChunkWriter("chatcmpl-x", "chat.completion.chunk", 1700000000, "mödel \"q\"")
    chat = {"index": 3, "delta": {"content": text}, "logprobs": None, "finish_reason": None}
    assert w.chat_content(3, text) == w.event([chat])
    assert w.chat_content(3, text) == "data: " + json.dumps(
        {"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1700000000, "model": "mödel \"q\"",
         "choices": [chat]}, ensure_ascii=False) + "\n\n"
    done = {"index": 0, "text": text, "logprobs": None, "finish_reason": None, "stop_reason": None}
    assert w.completion_text(0, text) == w.event([done])


def test_merge_deltas_joins_each_rows_deltas_in_order() -> None:
    deltas = [StreamDelta(0, "a", [1], [-0.1], []), StreamDelta(1, "x", [7], [-0.7], []),
              StreamDelta(0, "b", [2], [-0.2], []), StreamDelta(0, "", [3], [-0.3], [], "stop", None)]
    merged = merge_deltas(deltas)
    assert [(d.index, d.text, d.token_ids, d.logprobs, d.finish_reason) for d in merged] == [
        (0, "ab", [1, 2, 3], [-0.1, -0.2, -0.3], "stop"), (1, "x", [7], [-0.7], None)]
    assert deltas[0].text == "a" and deltas[0].token_ids == [1], "the engine's deltas are not modified"


async def test_a_reader_that_falls_behind_gets_the_ready_deltas_in_one_batch(engine, tokenizer) -> None:
    """Tokens made while the reader was away arrive together: one batch, the same tokens as generate()."""
    prompt = list(tokenizer("batch me", add_special_tokens=False)["input_ids"])
    params = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    whole = await engine.generate(prompt, params)
    before = engine.stats["tokens"]
    events = engine.stream(prompt, params)
    while engine.stats["tokens"] < before + 12:  # the engine finishes the request before we read anything
        await asyncio.sleep(0.01)
    items = [item async for item in events]
    batches, final = items[:-1], items[-1]
    assert len(batches) == 1
    assert [t for d in batches[0] for t in d.token_ids] == whole.outputs[0].token_ids == final.outputs[0].token_ids
    assert "".join(d.text for d in batches[0]) == whole.outputs[0].text
