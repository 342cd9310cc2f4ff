"""The Anthropic Messages API (``POST /v1/messages``) as the session's chat-completions call.

Request: ``system`` becomes the system message; a user turn's ``tool_result`` blocks become
tool messages (in their order) and its text and image blocks a user message; an assistant
turn's ``thinking``, ``text`` and ``tool_use`` blocks become one assistant message (reasoning,
content, tool calls with the input as JSON arguments), as the reply they came from was. Custom
tools (``input_schema``) become function tools; ``tool_choice`` (``auto``/``any``/``tool``/
``none``, ``disable_parallel_tool_use``) and ``stop_sequences`` are carried over; ``max_tokens``,
``temperature`` and the model stay the environment's. Server tools (web search, code execution,
bash, text editor, computer use) are refused: the gateway runs no tools.

Reply: the chat reply's reasoning, text and tool calls become ``thinking``, ``text`` and
``tool_use`` blocks (the call's id is the block's id), ``finish_reason`` the ``stop_reason``
(``tool_calls`` → ``tool_use``, ``length`` → ``max_tokens``). A streamed answer is the event
sequence of the complete reply (``message_start`` ... ``message_stop``). Errors have the API's
shape, ``{"type": "error", "error": {"type": ..., "message": ...}}``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from verifiers.gateway.dialects import DialectError, chat_content
from verifiers.gateway.dialects.core import (
    arguments_text,
    call_as_text,
    chat_tool_call,
    function_tool,
    named_tool_choice,
    new_id,
    read_reply,
    sse_event,
)

_STOP = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens", "content_filter": "refusal"}
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 409: "invalid_request_error", 413: "request_too_large",
                429: "rate_limit_error", 504: "timeout_error", 529: "overloaded_error"}


@dataclass(slots=True)
class MessagesRequest:
    """A translated request: the chat body and the stop sequences (to name the one that stopped)."""

    chat: dict[str, Any]
    stop_sequences: list[str]


def error_json(status: int, message: str) -> dict[str, Any]:
    """The Messages API's error body for an HTTP status."""
    kind = _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def models_json(model: str) -> dict[str, Any]:
    """``GET /v1/models`` in the Messages API's shape: the session's model only."""
    info = model_info(model)
    return {"data": [info], "has_more": False, "first_id": model, "last_id": model}


def model_info(model: str) -> dict[str, Any]:
    return {"type": "model", "id": model, "display_name": model, "created_at": "1970-01-01T00:00:00Z",
            "lifecycle": "active"}


# -- request -------------------------------------------------------------------------------
def _image(block: dict[str, Any]) -> dict[str, Any]:
    source = block.get("source") or {}
    if source.get("type") == "base64":
        return {"type": "image_url", "image_url": {"url": f"data:{source.get('media_type')};base64,{source.get('data')}"}}
    if source.get("type") == "url":
        return {"type": "image_url", "image_url": {"url": source.get("url")}}
    raise DialectError(f"image source type {source.get('type')!r} is not supported by the gateway "
                       "(it takes base64 and url images)")


def _blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list) or not all(isinstance(b, dict) for b in content):
        raise DialectError(f"{where}: content must be a string or a list of content blocks")
    return content


def _text_parts(content: Any, where: str) -> list[dict[str, Any]]:
    """Text and image blocks as chat parts (other blocks are refused)."""
    parts = []
    for block in _blocks(content, where):
        kind = block.get("type")
        if kind == "text":
            parts.append({"type": "text", "text": str(block.get("text", ""))})
        elif kind == "image":
            parts.append(_image(block))
        else:
            raise DialectError(f"{where}: content block type {kind!r} is not supported by the gateway")
    return parts


def _user(content: Any, out: list[dict[str, Any]]) -> None:
    pending: list[dict[str, Any]] = []

    def flush() -> None:
        if pending:
            out.append({"role": "user", "content": chat_content(list(pending))})
            pending.clear()

    for block in _blocks(content, "a user message"):
        kind = block.get("type")
        if kind == "tool_result":
            flush()
            result = block.get("content")
            parts = _text_parts(result if result is not None else "", "a tool_result")
            if any(p["type"] != "text" for p in parts):
                raise DialectError("a tool_result can only hold text here (the chat API's tool messages "
                                   "carry no images)")
            out.append({"role": "tool", "tool_call_id": str(block.get("tool_use_id")),
                        "content": chat_content(parts, text_only=True)})
        else:
            pending.extend(_text_parts([block], "a user message"))
    flush()


def _assistant(content: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": None}
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in _blocks(content, "an assistant message"):
        kind = block.get("type")
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind == "thinking":
            message["reasoning_content"] = str(block.get("thinking", ""))
        elif kind == "redacted_thinking":
            continue  # opaque to anyone but its issuer
        elif kind == "tool_use":
            data = block.get("input")
            if not isinstance(data, dict):  # what the Messages API itself refuses: never invented as {}
                shown = json.dumps(data, ensure_ascii=False)[:80]
                raise DialectError(f"an assistant message: a tool_use block's 'input' must be an object, got {shown}")
            calls.append(chat_tool_call(block.get("id"), block.get("name"), arguments_text(data)))
        else:
            raise DialectError(f"an assistant message: content block type {kind!r} is not supported by the "
                               "gateway (it runs no server tools)")
    if texts:
        message["content"] = "".join(texts)
    if calls:
        message["tool_calls"] = calls
    return message


def _system(system: Any) -> str | None:
    if system is None or isinstance(system, str):
        return system or None
    parts = _text_parts(system, "system")
    return "\n\n".join(p["text"] for p in parts if p["type"] == "text") or None


def _tools(tools: Any) -> list[dict[str, Any]] | None:
    if not tools:
        return None
    if not isinstance(tools, list):
        raise DialectError("'tools' must be a list")
    out = []
    for tool in tools:
        if not isinstance(tool, dict) or tool.get("type") not in (None, "custom") or "input_schema" not in tool:
            kind = tool.get("type") if isinstance(tool, dict) else tool
            raise DialectError(f"tool type {kind!r} is a server tool the gateway cannot run (it has no web search, "
                               "code execution, bash, text editor or computer): give the program custom tools "
                               "with an input_schema")
        out.append(function_tool(tool.get("name"), tool.get("description"), tool["input_schema"]))
    return out


def _tool_choice(choice: Any, chat: dict[str, Any]) -> None:
    if choice is None:
        return
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind == "auto":
        chat["tool_choice"] = "auto"
    elif kind == "any":
        chat["tool_choice"] = "required"
    elif kind == "none":
        chat["tool_choice"] = "none"
    elif kind == "tool" and choice.get("name"):
        chat["tool_choice"] = named_tool_choice(choice["name"])
    else:
        raise DialectError(f"tool_choice {choice!r} is not one of auto, any, tool (with a name), none")
    if choice.get("disable_parallel_tool_use"):
        chat["parallel_tool_calls"] = False


def to_chat(body: dict[str, Any]) -> MessagesRequest:
    """The chat body for a Messages request (raises `DialectError` for what cannot be served)."""
    if body.get("mcp_servers"):
        raise DialectError("'mcp_servers' (the MCP connector) is not served by the gateway: run the MCP "
                           "servers in the program and give their tools as custom tools")
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise DialectError("'messages' must be a non-empty list of messages")
    messages: list[dict[str, Any]] = []
    system = _system(body.get("system"))
    if system:
        messages.append({"role": "system", "content": system})
    for message in raw:
        role = message.get("role") if isinstance(message, dict) else None
        if role == "user":
            _user(message.get("content"), messages)
        elif role == "assistant":
            messages.append(_assistant(message.get("content")))
        else:
            raise DialectError(f"message role {role!r} is not 'user' or 'assistant' (the system prompt is "
                               "the top-level 'system')")
    chat: dict[str, Any] = {"messages": messages}
    tools = _tools(body.get("tools"))
    if tools:
        chat["tools"] = tools
    _tool_choice(body.get("tool_choice"), chat)
    stops = body.get("stop_sequences") or []
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise DialectError("'stop_sequences' must be a list of strings")
    if stops:
        chat["stop"] = stops
    return MessagesRequest(chat=chat, stop_sequences=stops)


# -- reply ---------------------------------------------------------------------------------
def message_object(chat_reply: dict[str, Any], request: MessagesRequest, model: str) -> dict[str, Any]:
    """The Message for a chat reply (what ``POST /v1/messages`` answers)."""
    reply = read_reply(chat_reply)
    blocks: list[dict[str, Any]] = []
    if reply.reasoning:
        blocks.append({"type": "thinking", "thinking": reply.reasoning, "signature": ""})
    # tool input is an object in this API: a call whose arguments are not one stays the text it was (core)
    text = reply.text + "".join(call_as_text(call) for call in reply.calls if call.value is None)
    if text:
        blocks.append({"type": "text", "text": text})
    calls = [{"type": "tool_use", "id": call.id or new_id("toolu"), "name": call.name, "input": call.value}
             for call in reply.calls if call.value is not None]
    blocks.extend(calls)
    if not blocks:
        blocks.append({"type": "text", "text": ""})
    finish = reply.finish_reason
    if finish == "tool_calls" and not calls:
        finish = "stop"  # no call was delivered: the turn ended
    stop_reason = _STOP.get(finish, "end_turn")
    stop_sequence = reply.matched_stop if reply.matched_stop in request.stop_sequences else None
    if stop_sequence is not None and finish == "stop":
        stop_reason = "stop_sequence"
    return {
        "id": new_id("msg"), "type": "message", "role": "assistant", "model": model, "content": blocks,
        "stop_reason": stop_reason, "stop_sequence": stop_sequence,
        "usage": {"input_tokens": reply.prompt_tokens, "output_tokens": reply.completion_tokens,
                  "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
    }


def sse_events(message: dict[str, Any]) -> list[bytes]:
    """The Messages event stream of a complete message, ``message_start`` to ``message_stop``."""
    events: list[bytes] = []

    def emit(kind: str, **fields: Any) -> None:
        events.append(sse_event({"type": kind, **fields}, kind))

    usage = message["usage"]
    emit("message_start", message={**message, "content": [], "stop_reason": None, "stop_sequence": None,
                                   "usage": {**usage, "output_tokens": 0}})
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            emit("content_block_start", index=index, content_block={"type": "text", "text": ""})
            if block["text"]:
                emit("content_block_delta", index=index, delta={"type": "text_delta", "text": block["text"]})
        elif block["type"] == "thinking":
            emit("content_block_start", index=index, content_block={"type": "thinking", "thinking": "", "signature": ""})
            emit("content_block_delta", index=index, delta={"type": "thinking_delta", "thinking": block["thinking"]})
            emit("content_block_delta", index=index, delta={"type": "signature_delta", "signature": ""})
        else:  # tool_use
            emit("content_block_start", index=index, content_block={**block, "input": {}})
            emit("content_block_delta", index=index,
                 delta={"type": "input_json_delta", "partial_json": json.dumps(block["input"], ensure_ascii=False)})
        emit("content_block_stop", index=index)
    emit("message_delta", delta={"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]},
         usage={"output_tokens": usage["output_tokens"]})
    emit("message_stop")
    return events
