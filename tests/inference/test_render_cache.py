"""The embedded server renders a chat once per distinct input and hands out the same ids after."""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import pytest

from verifiers.inference.server.render_cache import RenderCache

MODEL = "tiny"


def api_of(client: openai.AsyncOpenAI) -> Any:
    """The `EmbeddedAPI` behind an in-process client (its ASGI app's state)."""
    return client._client._transport.app.state.api


async def test_a_group_of_identical_requests_renders_once_with_the_same_ids(inproc, ref) -> None:
    api = api_of(inproc)
    before = (api.renders.hits, api.renders.misses)
    messages = [{"role": "user", "content": "render me once"}]
    outs = await asyncio.gather(*[
        inproc.chat.completions.create(model=MODEL, messages=messages, temperature=0, max_tokens=4,
                                       extra_body={"return_token_ids": True}) for _ in range(8)])
    assert {tuple(o.prompt_token_ids) for o in outs} == {tuple(ref.chat_ids(messages))}
    assert (api.renders.hits - before[0], api.renders.misses - before[1]) == (7, 1)
    other = await inproc.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "another"}],
                                                 max_tokens=1, extra_body={"return_token_ids": True})
    assert list(other.prompt_token_ids) == ref.chat_ids([{"role": "user", "content": "another"}])
    assert api.renders.misses - before[1] == 2


def test_inputs_that_differ_anywhere_render_again(tokenizer) -> None:
    cache, calls = RenderCache(tokenizer), []

    def render(value: int) -> Any:
        return lambda: calls.append(value) or [value]

    msgs = [{"role": "user", "content": "x"}]
    assert cache.ids(msgs, None, True, {}, render(1)) == [1]
    assert cache.ids([{"content": "x", "role": "user"}], None, True, {}, render(2)) == [1]  # key order is not content
    assert cache.ids(msgs, None, False, {}, render(3)) == [3]
    assert cache.ids(msgs, [{"type": "function", "function": {"name": "f"}}], True, {}, render(4)) == [4]
    assert cache.ids(msgs, None, True, {"enable_thinking": False}, render(5)) == [5]
    assert calls == [1, 3, 4, 5]
    got = cache.ids(msgs, None, True, {}, render(6))
    got.append(99)  # a caller changing its list does not change the cache
    assert cache.ids(msgs, None, True, {}, render(7)) == [1]


def test_a_new_template_a_clock_reading_template_and_non_json_messages_are_not_served_stale(tokenizer) -> None:
    class Tok:
        chat_template = "{{ messages }}"

    tok = Tok()
    cache = RenderCache(tok, max_entries=2)
    msgs = [{"role": "user", "content": "x"}]
    assert cache.ids(msgs, None, True, {}, lambda: [1]) == [1]
    tok.chat_template = "{{ messages }}!"
    assert cache.ids(msgs, None, True, {}, lambda: [2]) == [2]
    tok.chat_template = "{{ strftime_now('%d %b %Y') }}{{ messages }}"
    assert cache.ids(msgs, None, True, {}, lambda: [3]) == [3]
    assert cache.ids(msgs, None, True, {}, lambda: [4]) == [4]
    tok.chat_template = "{{ messages }}"
    assert cache.ids([{"role": "user", "content": object()}], None, True, {}, lambda: [5]) == [5]
    assert cache.ids([{"role": "user", "content": object()}], None, True, {}, lambda: [6]) == [6]
    for i in range(3):  # bounded: the oldest entry leaves
        cache.ids([{"role": "user", "content": str(i)}], None, True, {}, lambda i=i: [10 + i])
    assert len(cache._entries) == 2
    assert cache.ids([{"role": "user", "content": "0"}], None, True, {}, lambda: [20]) == [20]


def test_the_cache_holds_at_most_its_byte_budget(tokenizer) -> None:
    """Long prompts that are each new (an agent's turns) push old entries out by size, not count."""
    cache = RenderCache(tokenizer, max_bytes=20_000)
    for i in range(10):
        cache.ids([{"role": "user", "content": f"{i} " + "x" * 1000}], None, True, {}, lambda: list(range(200)))
        assert cache.nbytes <= 20_000
    assert 1 <= len(cache._entries) < 10
    assert cache.nbytes == sum(len(k) + 36 * len(v) for k, v in cache._entries.items())


def test_threads_asking_together_share_one_render_and_a_failed_render_is_not_kept(tokenizer) -> None:
    import threading
    import time

    cache, calls = RenderCache(tokenizer), []
    msgs = [{"role": "user", "content": "together"}]

    def slow() -> list[int]:
        calls.append(1)
        time.sleep(0.2)
        return [7, 8]

    got: list[list[int]] = []
    threads = [threading.Thread(target=lambda: got.append(cache.ids(msgs, None, True, {}, slow))) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [[7, 8]] * 6 and len(calls) == 1

    def broken() -> list[int]:
        raise ValueError("template error")

    bad = [{"role": "user", "content": "fails"}]
    for _ in range(2):  # each caller gets the error; nothing is cached for the input
        with pytest.raises(ValueError, match="template error"):
            cache.ids(bad, None, True, {}, broken)
    assert cache.ids(bad, None, True, {}, lambda: [1]) == [1]
