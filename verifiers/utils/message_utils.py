"""0.1.x path ``verifiers.utils.message_utils``: message clean-up and printing helpers.

Same contracts as upstream: `cleanup_messages` keeps only the keys the API needs and
normalises content parts, `messages_to_printable` flattens content to text with
``[image]``/``[audio]`` placeholders, `sanitize_tool_calls` turns tool-call objects
into JSON strings (for Arrow, which cannot store SDK objects). They accept plain
dict tool calls as well as openai SDK objects, since this library keeps messages as
dicts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from verifiers.clients.response import overlong_prompt_response
from verifiers.types import ChatMessage, Messages, MessageType, ModelResponse

__all__ = [
    "cleanup_message",
    "cleanup_messages",
    "get_overlong_prompt_dummy_response",
    "message_to_printable",
    "messages_to_printable",
    "sanitize_tool_calls",
]


def _part_dict(part: Any) -> dict[str, Any]:
    return dict(part) if isinstance(part, Mapping) else part.model_dump(exclude_none=True)


def message_to_printable(message: ChatMessage) -> ChatMessage:
    """The message with its content as one string; images and audio become placeholders."""
    out: dict[str, Any] = {"role": message["role"], "content": []}
    if "tool_calls" in message:
        out["tool_calls"] = message["tool_calls"]  # type: ignore[typeddict-item]
    content = message.get("content")
    if content is None:
        return out  # type: ignore[return-value]
    pieces: list[str] = []
    if isinstance(content, str):
        pieces.append(content)
    else:
        for part in content:
            if isinstance(part, str):
                pieces.append(part)
                continue
            d = _part_dict(part)
            kind = str(d.get("type", ""))
            if kind == "text":
                pieces.append(d.get("text", ""))
            elif kind == "image_url":
                pieces.append("[image]")
            elif kind.startswith("input_audio"):
                pieces.append("[audio]")
    out["content"] = "\n\n".join(pieces)
    return out  # type: ignore[return-value]


def messages_to_printable(messages: Messages) -> Messages:
    """`message_to_printable` over a chat; a string is returned as is."""
    if isinstance(messages, str):
        return messages
    return [message_to_printable(m) for m in messages]  # type: ignore[arg-type]


def cleanup_message(message: ChatMessage) -> ChatMessage:
    """Only ``role``, ``content``, ``tool_calls`` and ``tool_call_id``; stray keys of parts removed."""
    out: dict[str, Any] = {"role": message["role"]}
    for key in ("tool_calls", "tool_call_id"):
        if key in message:
            out[key] = message[key]  # type: ignore[literal-required]
    content = message.get("content")
    if content is None:
        out["content"] = []
        return out  # type: ignore[return-value]
    if isinstance(content, str):
        out["content"] = content
        return out  # type: ignore[return-value]
    parts: list[Any] = []
    for part in content:
        d = _part_dict(part)
        kind = str(d.get("type", ""))
        if kind == "text":
            d.pop("image_url", None)  # Arrow fills the union of keys with None
        elif kind == "image_url":
            d.pop("text", None)
        elif kind.startswith("input_audio"):
            d = {"type": "input_audio", "input_audio": d.get("input_audio", {})}
        parts.append(d)
    out["content"] = parts
    return out  # type: ignore[return-value]


def cleanup_messages(messages: Messages) -> Messages:
    """`cleanup_message` over a chat; a string is returned as is."""
    if isinstance(messages, str):
        return messages
    return [cleanup_message(m) for m in messages]  # type: ignore[arg-type]


def _tool_call_json(tool_call: Any) -> str:
    if isinstance(tool_call, str):
        return tool_call
    if isinstance(tool_call, Mapping):
        return json.dumps(dict(tool_call))
    return json.dumps(tool_call.model_dump())


def sanitize_tool_calls(messages: Messages) -> Messages:
    """Messages whose ``tool_calls`` are JSON strings (upstream's storage format for Arrow)."""
    if not isinstance(messages, list):
        return messages
    out: list[Any] = []
    for m in messages:
        if "tool_calls" in m:
            out.append(
                {
                    "role": m["role"],
                    "content": m.get("content", ""),
                    "tool_calls": [_tool_call_json(tc) for tc in m.get("tool_calls") or []],
                }
            )
        else:
            out.append(m)
    return out


def get_overlong_prompt_dummy_response(message_type: MessageType) -> ModelResponse:
    """The placeholder response upstream records when a prompt does not fit the context."""
    return overlong_prompt_response(message_type)
