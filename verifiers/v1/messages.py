"""Typed chat messages, the form v1 hooks read (``trace.assistant_messages[-1].content``).

Our core passes OpenAI-shaped dicts; v1 hooks expect attribute access. These pydantic models are
the conversion at that boundary (`from_dict` / `to_dict`), nothing more.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict


class ToolCall(BaseModel):
    id: str = ""
    name: str
    arguments: str = "{}"


class _Message(BaseModel):
    model_config = ConfigDict(extra="allow")


class SystemMessage(_Message):
    role: Literal["system"] = "system"
    content: Any = ""


class UserMessage(_Message):
    role: Literal["user"] = "user"
    content: Any = ""


class AssistantMessage(_Message):
    role: Literal["assistant"] = "assistant"
    content: str | None = None
    tool_calls: list[ToolCall] | None = None
    reasoning_content: str | None = None


class ToolMessage(_Message):
    role: Literal["tool"] = "tool"
    tool_call_id: str = ""
    content: Any = ""
    name: str | None = None


Message = SystemMessage | UserMessage | AssistantMessage | ToolMessage
Messages = list[Message]

_BY_ROLE: dict[str, type[_Message]] = {
    "system": SystemMessage,
    "developer": SystemMessage,
    "user": UserMessage,
    "assistant": AssistantMessage,
    "tool": ToolMessage,
}


def content_text(content: Any) -> str:
    """The text of a message's content, whether a string or a list of content parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = [p.get("text", "") if isinstance(p, dict) else getattr(p, "text", "") for p in content]
    return "\n".join(p for p in parts if p)


def _tool_call(raw: Any) -> ToolCall:
    get = raw.get if isinstance(raw, dict) else lambda k, d=None: getattr(raw, k, d)
    function = get("function") or {}
    fget = function.get if isinstance(function, dict) else lambda k, d=None: getattr(function, k, d)
    arguments = fget("arguments")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments if arguments is not None else {})
    return ToolCall(id=str(get("id") or ""), name=str(fget("name") or ""), arguments=arguments)


def from_dict(message: Any) -> Message:
    """A typed message from an OpenAI-shaped dict (or one of these models, returned as is)."""
    if isinstance(message, _Message):
        return message  # type: ignore[return-value]
    data = dict(message)
    role = str(data.get("role", "user"))
    if role == "assistant" and data.get("tool_calls"):
        data["tool_calls"] = [_tool_call(tc) for tc in data["tool_calls"]]
    cls = _BY_ROLE.get(role, UserMessage)
    if role == "developer":
        data["role"] = "system"
    return cls.model_validate(data)  # type: ignore[return-value]


def to_dict(message: Any) -> dict[str, Any]:
    """The OpenAI-shaped dict the core sends for a typed message (or a dict, copied)."""
    if not isinstance(message, _Message):
        return dict(message)
    data = message.model_dump(exclude_none=True)
    if isinstance(message, AssistantMessage) and message.tool_calls:
        data["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.tool_calls
        ]
    return data
