"""In-process use: the openai client over an in-memory ASGI transport, no socket, same answers."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import openai
import pytest

import verifiers as vf

MODEL = "tiny"


async def greedy(client: Any, text: str, max_tokens: int = 12) -> Any:
    return await client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": text}], temperature=0, max_tokens=max_tokens,
        logprobs=True, extra_body={"return_token_ids": True},
    )


async def test_same_greedy_output_as_the_http_server(inproc, aclient) -> None:
    for text in ("hello", "in process"):
        a, b = await greedy(inproc, text), await greedy(aclient, text)
        assert list(a.choices[0].token_ids) == list(b.choices[0].token_ids)
        assert list(a.prompt_token_ids) == list(b.prompt_token_ids)
        assert a.choices[0].message.content == b.choices[0].message.content
        assert [e.logprob for e in a.choices[0].logprobs.content] == [e.logprob for e in b.choices[0].logprobs.content]


async def test_no_socket_is_opened(inproc, aclient, monkeypatch, ref) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionRefusedError("no network in this test: the in-process client must not connect")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    with pytest.raises(openai.APIConnectionError):  # the guard does catch a real HTTP client
        await greedy(aclient, "offline")
    r = await greedy(inproc, "offline")
    assert list(r.choices[0].token_ids) == ref.greedy_chat("offline", 12)
    c = await inproc.completions.create(model=MODEL, prompt="offline", temperature=0, max_tokens=5)
    assert c.choices[0].text == ref.decode(ref.greedy(ref.encode("offline"), 5))


async def test_concurrent_in_process_requests_are_batched_and_exact(inproc, engine, ref) -> None:
    texts = [f"batch {i}" for i in range(8)]
    outs = await asyncio.gather(*[greedy(inproc, t, 8) for t in texts])
    assert [list(o.choices[0].token_ids) for o in outs] == [ref.greedy_chat(t, 8) for t in texts]
    assert engine.stats["max_batch"] > 1


async def test_streaming_in_process(inproc) -> None:
    kw = {"model": MODEL, "messages": [{"role": "user", "content": "s"}], "seed": 4, "max_tokens": 10}
    whole = await inproc.chat.completions.create(**kw)
    stream = await inproc.chat.completions.create(stream=True, **kw)
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == whole.choices[0].message.content


async def test_an_environment_runs_on_the_in_process_client(inproc, tokenizer) -> None:
    rows = [{"question": "abc", "answer": "cba"}, {"question": "hi", "answer": "ih"}]

    def length(completion: Any) -> float:
        return float(len(completion[-1]["content"] or ""))

    env = vf.SingleTurnEnv(dataset=rows, rubric=vf.Rubric(funcs=[length]))
    out = await env.a_evaluate(
        inproc, MODEL, rollouts_per_example=2,
        sampling_args={"max_tokens": 6, "logprobs": True, "extra_body": {"return_token_ids": True}},
    )
    assert out.error == [None] * 4
    for res in out.results:
        (turn,) = res.tokens
        assert tokenizer.decode(turn.completion_ids, skip_special_tokens=True) == res.completion[-1]["content"]
        assert len(turn.completion_logprobs) == len(turn.completion_ids) <= 6


async def test_small_bodies_are_parsed_on_the_event_loop_and_large_ones_in_a_thread(engine, monkeypatch) -> None:
    """A typical request skips the hop to a worker thread; a huge one still never blocks the loop."""
    import threading

    from verifiers.inference.server import api as api_mod

    threads: list[int] = []
    parse = api_mod.EmbeddedAPI._parse_chat

    def recording(self: Any, body: Any) -> Any:
        threads.append(threading.get_ident())
        return parse(self, body)

    monkeypatch.setattr(api_mod.EmbeddedAPI, "_parse_chat", recording)
    api = api_mod.EmbeddedAPI(engine, [MODEL])
    small = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    large = {**small, "messages": [{"role": "user", "content": "word " * 4_000}]}
    assert api_mod.body_chars(small) <= api_mod.INLINE_PARSE_CHARS < api_mod.body_chars(large)
    out = await api.chat(small)
    assert out["choices"][0]["finish_reason"] in ("stop", "length")
    with pytest.raises(vf.OverlongPromptError):  # 20k tokens for a 2k context: refused, from the worker thread
        await api.chat(large)
    loop_thread = threading.get_ident()
    assert threads[0] == loop_thread and threads[1] != loop_thread


def test_body_size_estimate_counts_messages_prompts_and_tools() -> None:
    from verifiers.inference.server.api import INLINE_PARSE_CHARS, body_chars

    assert body_chars({"messages": [{"role": "user", "content": "abc"}, {"role": "assistant", "content": None}]}) == 3
    parts = [{"type": "text", "text": "ab"}, {"type": "image_url", "image_url": {"url": "x"}}]
    assert body_chars({"messages": [{"role": "user", "content": parts}]}) == 2 + 1_000
    assert body_chars({"messages": [], "tools": [{}] * 3}) == 3_000
    assert body_chars({"prompt": "abcd"}) == 4 and body_chars({"prompt": [[1, 2, 3], [4]]}) == 4
    assert body_chars("not a dict") > INLINE_PARSE_CHARS  # unknown shapes take the safe path
