"""The OpenAI wire format on the program's side of the gateway: requests in, replies out.

Kept apart from the session logic so that what a program may set (its messages, tools,
``tool_choice``, ``stop``) and what the environment decides (model, sampling, token ids) are
written down in one place, and so that replies never leak the token fields the trainer needs
but the program must not see.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from aiohttp import web

from verifiers.clients.response import ModelResponse
from verifiers.gateway.dialects.core import arguments_text, sse_event

PROGRAM_KEYS = ("tool_choice", "parallel_tool_calls", "stop", "response_format")
"""Request fields the program keeps; every other sampling field is the environment's."""

_HIDDEN_TOP = ("prompt_token_ids", "prompt_logprobs", "kv_transfer_params", "weight_version")
_HIDDEN_CHOICE = ("token_ids", "prompt_token_ids")


def error_body(
    message: str, kind: str = "invalid_request_error", code: str | None = None, param: str | None = None
) -> dict[str, Any]:
    """An OpenAI-style error object (the SDKs read ``error.message``)."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def program_args(body: dict[str, Any]) -> dict[str, Any]:
    """The fields of the program's request that are passed upstream unchanged."""
    return {k: body[k] for k in PROGRAM_KEYS if body.get(k) is not None}


def reply_json(response: ModelResponse, model: str, *, keep_logprobs: bool) -> dict[str, Any]:
    """The chat.completion the program receives: one choice, no token ids, the session's model."""
    raw = response.raw if isinstance(response.raw, dict) and response.raw.get("choices") else None
    if raw is None:
        raw = {
            "choices": [{"index": 0, "message": response.to_message(), "finish_reason": response.finish_reason}],
            "usage": {
                "prompt_tokens": response.usage.prompt_tokens,
                "completion_tokens": response.usage.completion_tokens,
                "total_tokens": response.usage.prompt_tokens + response.usage.completion_tokens,
            },
        }
    out = {k: v for k, v in raw.items() if k not in _HIDDEN_TOP}
    choice = {k: v for k, v in raw["choices"][0].items() if k not in _HIDDEN_CHOICE}
    choice["index"] = 0
    if not keep_logprobs:
        choice["logprobs"] = None
    message = dict(choice.get("message") or {})
    if not message.get("tool_calls"):
        message.pop("tool_calls", None)
    else:  # the model's argument text as it was, valid JSON or not (dialects.core); a server's object as text
        message["tool_calls"] = [{**call, "function": {**(call.get("function") or {}), "arguments": arguments_text(
            (call.get("function") or {}).get("arguments"))}} for call in message["tool_calls"]]
    message.setdefault("role", "assistant")
    choice["message"] = message
    out["choices"] = [choice]
    out.setdefault("id", f"chatcmpl-{uuid.uuid4().hex}")
    out.setdefault("created", int(time.time()))
    out["object"] = "chat.completion"
    out["model"] = model
    return out


def sse_events(reply: dict[str, Any], *, include_usage: bool) -> list[bytes]:
    """A streamed answer built from the complete reply: role+content, tool calls, finish, [DONE].

    The gateway always samples the whole reply first (it must record the token ids), so
    streaming to the program is a framing of a known answer, never a relay of partial tokens.
    """
    choice = reply["choices"][0]
    message = choice.get("message") or {}
    base = {"id": reply["id"], "object": "chat.completion.chunk", "created": reply["created"], "model": reply["model"]}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return sse_event({**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]})

    events = [chunk({"role": "assistant", "content": message.get("content") or ""})]
    calls = message.get("tool_calls") or []
    if calls:
        events.append(chunk({"tool_calls": [{"index": i, **tc} for i, tc in enumerate(calls)]}))
    events.append(chunk({}, choice.get("finish_reason") or "stop"))
    if include_usage and reply.get("usage"):
        events.append(sse_event({**base, "choices": [], "usage": reply["usage"]}))
    events.append(b"data: [DONE]\n\n")
    return events


def models_json(model: str) -> dict[str, Any]:
    return {"object": "list", "data": [{"id": model, "object": "model", "created": 0, "owned_by": "verifiers"}]}


async def sse_response(request: web.Request, events: list[bytes]) -> web.StreamResponse:
    """Write already-framed server-sent ``events`` as one ``text/event-stream`` answer (aiohttp)."""
    stream = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await stream.prepare(request)
    for event in events:
        await stream.write(event)
    await stream.write_eof()
    return stream
