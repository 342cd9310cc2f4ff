"""What every dialect builds the same way: tools, tool calls and their arguments, reasoning, ids, events.

Each dialect (chat completions in `verifiers.gateway.wire`, `responses`, `anthropic`) is a pair
of translations: its request to the session's chat request, and the chat reply to its answer
and its event stream. The pieces they share are built here, once, so that a tool call, its
arguments or a reasoning text cannot come out of one dialect differently from another.

**Malformed tool arguments.** A model can write a tool call whose arguments are not a JSON
object. Every path treats it as OpenAI's APIs do, which document that the ``arguments`` of a
function call are the text the model generated and that "the model does not always generate
valid JSON ... validate the arguments in your code before calling your function": the text is
delivered as it was written, never repaired, never replaced by ``{}``, never dropped. Chat
completions and the Responses API carry it in ``arguments``. The Messages API has no field for
it (a ``tool_use`` block's ``input`` is an object), so there such a call reaches the program
as the text the model wrote, in a ``<tool_call>`` block of the reply's text, and the turn
ends (``end_turn``): the program sees exactly what was generated and the rollout records it.
On the request side, history a program sends back is held to the same rule: a dialect whose
field is the model's text takes text (or an object, serialised), one whose field is an object
takes an object; anything else is refused (400), never invented.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any

from verifiers.gateway.dialects import DialectError


def new_id(prefix: str) -> str:
    """An id in the APIs' style (``resp_…``, ``msg_…``, ``fc_…``, ``rs_…``, ``toolu_…``)."""
    return f"{prefix}_{secrets.token_hex(24)}"


def function_tool(name: Any, description: Any, parameters: Any, *, strict: Any = None) -> dict[str, Any]:
    """A chat-completions function tool, its keys in the chat API's order (the order the SDKs send
    and the template renders). ``name`` must be a string; empty fields are left out."""
    if not isinstance(name, str):
        raise DialectError("a function tool needs a string 'name'", param="tools")
    fn: dict[str, Any] = {"name": name}
    if description:
        fn["description"] = description
    if parameters is not None:
        fn["parameters"] = parameters
    if strict is not None:
        fn["strict"] = strict
    return {"type": "function", "function": fn}


def named_tool_choice(name: str) -> dict[str, Any]:
    """The chat ``tool_choice`` that forces one named function (Responses' ``{"type": "function",
    "name"}``, Messages' ``{"type": "tool", "name"}``)."""
    return {"type": "function", "function": {"name": name}}


def arguments_text(arguments: Any) -> str:
    """A tool call's arguments as the text a chat message carries (an object is serialised)."""
    if isinstance(arguments, str):
        return arguments
    if arguments is None:
        return ""
    return json.dumps(arguments, ensure_ascii=False)


def arguments_object(text: str) -> dict[str, Any] | None:
    """The arguments as a JSON object, or None when the text is not one (see the module docstring)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def chat_tool_call(call_id: Any, name: Any, arguments: str) -> dict[str, Any]:
    """A tool call of an assistant message in the chat request (history a program sends back)."""
    return {"id": str(call_id), "type": "function", "function": {"name": str(name), "arguments": arguments}}


@dataclass(slots=True, frozen=True)
class ReplyCall:
    """One tool call of the chat reply: its id ("" when the server gave none: each dialect makes one
    in its own style), name, the model's argument text and, when that text is a JSON object, the object."""

    id: str
    name: str
    text: str
    value: dict[str, Any] | None


@dataclass(slots=True, frozen=True)
class ChatReply:
    """The chat reply as every dialect reads it."""

    reasoning: str | None
    text: str
    calls: list[ReplyCall]
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    logprobs: list[dict[str, Any]]
    matched_stop: str | None
    """The stop string that ended the reply, when the server names it (vLLM's ``stop_reason``)."""


def read_reply(chat_reply: dict[str, Any]) -> ChatReply:
    """The parts of a chat-completions reply (its first choice) that the dialects render."""
    choice = chat_reply["choices"][0]
    message = choice.get("message") or {}
    calls = []
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        text = arguments_text(fn.get("arguments"))
        calls.append(ReplyCall(id=call.get("id") or "", name=fn.get("name", ""), text=text,
                               value=arguments_object(text)))
    usage = chat_reply.get("usage") or {}
    matched = choice.get("stop_reason")
    return ChatReply(
        reasoning=message.get("reasoning_content") or message.get("reasoning") or None,
        text=message.get("content") or "",
        calls=calls,
        finish_reason=choice.get("finish_reason") or "stop",
        prompt_tokens=int(usage.get("prompt_tokens") or 0),
        completion_tokens=int(usage.get("completion_tokens") or 0),
        logprobs=list((choice.get("logprobs") or {}).get("content") or []),
        matched_stop=matched if isinstance(matched, str) else None,
    )


def call_as_text(call: ReplyCall) -> str:
    """A tool call written back as the text the model generated it as (the Hermes convention)."""
    return f'<tool_call>\n{{"name": {json.dumps(call.name)}, "arguments": {call.text or "null"}}}\n</tool_call>'


def sse_event(payload: dict[str, Any], kind: str | None = None) -> bytes:
    """One server-sent event: ``event: KIND`` (the Responses and Messages streams name theirs) and
    the payload as JSON."""
    data = f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"
    return (f"event: {kind}\n" + data if kind else data).encode()


__all__ = ["ChatReply", "ReplyCall", "arguments_object", "arguments_text", "call_as_text", "chat_tool_call",
           "function_tool", "named_tool_choice", "new_id", "read_reply", "sse_event"]
