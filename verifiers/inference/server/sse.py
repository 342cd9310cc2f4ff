"""Server-sent events of one streamed response: OpenAI's ``data: {...}\\n\\n`` chunks, rendered cheaply.

A streamed response sends one chunk per row per engine step, and at 64 concurrent streams that
is thousands of chunks a second through one event loop, so the common chunk (a delta that only
carries text) is rendered from a prefix built once per stream plus the escaped text, without
building a dict. The bytes are exactly what ``json.dumps(chunk, ensure_ascii=False)`` gives for the
same chunk (a test holds the two equal), so clients cannot tell which path wrote a chunk.

`merge_deltas` joins the deltas of one row that arrived together (a reader that fell behind),
as vLLM does, so one chunk carries them.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from json.encoder import encode_basestring  # json.dumps's string encoder when ensure_ascii=False
from typing import Any

from verifiers.inference.engine import RequestOutput, StreamDelta

DONE = "data: [DONE]\n\n"


class ChunkWriter:
    """Renders the chunks of one stream (``id``, ``object``, ``created``, ``model`` fixed per stream)."""

    def __init__(self, cid: str, obj: str, created: int, model: str) -> None:
        self.head = {"id": cid, "object": obj, "created": created, "model": model}
        head = json.dumps(self.head, ensure_ascii=False)
        self._choice_prefix = f'data: {head[:-1]}, "choices": [{{"index": '

    def event(self, choices: list[dict[str, Any]], **extra: Any) -> str:
        """Any chunk: the stream's head, ``choices`` and ``extra`` fields (usage, prompt ids)."""
        body = {**self.head, "choices": choices, **extra}
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

    def chat_content(self, index: int, text: str) -> str:
        """A chat chunk whose only news is ``text`` for choice ``index``."""
        return (f'{self._choice_prefix}{index}, "delta": {{"content": {encode_basestring(text)}}}, '
                '"logprobs": null, "finish_reason": null}]}\n\n')

    def completion_text(self, index: int, text: str) -> str:
        """A completions chunk whose only news is ``text`` for choice ``index``."""
        return (f'{self._choice_prefix}{index}, "text": {encode_basestring(text)}, "logprobs": null, '
                '"finish_reason": null, "stop_reason": null}]}\n\n')


def merge_deltas(deltas: Sequence[StreamDelta]) -> list[StreamDelta]:
    """One delta per row, in the order rows first appear: text, token ids and logprobs joined in order.

    Only a row's last delta can carry a finish reason, so the merged delta takes the last one's.
    """
    if len(deltas) < 2:
        return list(deltas)
    merged: dict[int, StreamDelta] = {}
    for d in deltas:
        m = merged.get(d.index)
        if m is None:
            merged[d.index] = StreamDelta(d.index, d.text, list(d.token_ids), list(d.logprobs),
                                          list(d.top_logprobs), d.finish_reason, d.stop_reason)
            continue
        m.text += d.text
        m.token_ids += d.token_ids
        m.logprobs += d.logprobs
        m.top_logprobs += d.top_logprobs
        m.finish_reason, m.stop_reason = d.finish_reason, d.stop_reason
    return list(merged.values())


class DeltaBatches:
    """An engine stream (`InferenceEngine.stream`) as batches of merged deltas, one batch per list the
    engine had ready; ``final`` holds the `RequestOutput` the stream ends with, once it has."""

    def __init__(self, events: AsyncIterator[list[StreamDelta] | RequestOutput]) -> None:
        self.events = events
        self.final: RequestOutput | None = None

    async def __aiter__(self) -> AsyncIterator[list[StreamDelta]]:
        async for ev in self.events:
            if isinstance(ev, RequestOutput):
                self.final = ev
            else:
                yield merge_deltas(ev)
