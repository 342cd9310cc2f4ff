"""A chat completion as the server-sent events an OpenAI-compatible server streams.

Streaming clients (SDK agents, verifiers v1's chat harness, ``openai``'s ``stream=True``) read a
reply as deltas: a first chunk with the role, content in pieces, each tool call opened with its
id and name and then its arguments in pieces, a last chunk with the finish reason, the usage
when ``stream_options.include_usage`` asks for it, then ``[DONE]``. The scripted server frames
its complete reply that way, in small pieces, so a client's accumulation is really exercised.
"""

from __future__ import annotations

import json
from typing import Any

PIECE = 8
"""Characters per content or arguments delta."""


def _pieces(text: str) -> list[str]:
    return [text[i : i + PIECE] for i in range(0, len(text), PIECE)]


def chat_chunks(reply: dict[str, Any], *, include_usage: bool) -> list[bytes]:
    """Every event of ``reply`` (a ``chat.completion``), for every choice, ending with ``[DONE]``."""
    base = {"id": reply["id"], "object": "chat.completion.chunk", "created": reply["created"], "model": reply["model"]}
    events: list[bytes] = []

    def emit(index: int, delta: dict[str, Any], finish: str | None = None, **extra: Any) -> None:
        body = {**base, "choices": [{"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}],
                **extra}
        events.append(f"data: {json.dumps(body, ensure_ascii=False)}\n\n".encode())

    for choice in reply["choices"]:
        index, message = choice["index"], choice.get("message") or {}
        emit(index, {"role": "assistant", "content": ""})
        for piece in _pieces(message.get("content") or ""):
            emit(index, {"content": piece})
        for n, call in enumerate(message.get("tool_calls") or []):
            fn = call["function"]
            emit(index, {"tool_calls": [{"index": n, "id": call["id"], "type": "function",
                                         "function": {"name": fn["name"], "arguments": ""}}]})
            for piece in _pieces(fn.get("arguments") or ""):
                emit(index, {"tool_calls": [{"index": n, "function": {"arguments": piece}}]})
        extra = {"token_ids": choice["token_ids"]} if "token_ids" in choice else {}
        emit(index, {}, choice.get("finish_reason") or "stop", **extra)
    if include_usage and reply.get("usage"):
        events.append(f"data: {json.dumps({**base, 'choices': [], 'usage': reply['usage']})}\n\n".encode())
    events.append(b"data: [DONE]\n\n")
    return events
