"""The OpenAI Responses API (``POST /responses``) as the session's chat-completions call.

Request: ``instructions`` become the system message; ``input`` (a string or items) become chat
messages, where an assistant turn's items (``reasoning``, an output ``message``, its
``function_call``\\s) are one assistant message, as the reply they came from was; each
``function_call_output`` is a tool message. ``previous_response_id`` puts the stored
conversation of that response (its input and output, without its instructions, as the API
does) before the new input, so a follow-up is the same growing chat history a chat program
would send and token-in applies to it. Function tools, ``tool_choice``, ``parallel_tool_calls``
and ``text.format`` (structured output) are carried over; the model and sampling stay the
environment's. Built-in tools (web search, file search, computer use, ...) are refused: the
gateway runs no tools.

Reply: the chat reply's reasoning, text and tool calls become ``reasoning``, ``message`` and
``function_call`` output items (the call's id is the item's ``call_id``); ``length`` makes the
response ``incomplete``. A streamed answer is the event sequence of the complete reply
(``response.created`` ... ``response.completed``), as chat streaming is framed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from verifiers.gateway.dialects import DialectError, chat_content
from verifiers.gateway.dialects.core import (
    arguments_text,
    chat_tool_call,
    function_tool,
    named_tool_choice,
    new_id,
    read_reply,
    sse_event,
)

_ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}
_TEXT_PARTS = ("input_text", "output_text", "text", "summary_text", "reasoning_text")
_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


@dataclass(slots=True)
class StoredResponse:
    """A response kept in its session for ``previous_response_id`` and ``GET /responses/{id}``."""

    response: dict[str, Any]
    history: list[dict[str, Any]]
    """The chat messages of its input (after its instructions) and its reply: what a follow-up continues."""
    items: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Its input and output items by id (``item_reference`` looks them up)."""


@dataclass(slots=True)
class ResponsesRequest:
    """A translated request: the chat body and what the reply needs to become a Response."""

    chat: dict[str, Any]
    history: list[dict[str, Any]]
    body: dict[str, Any]
    items: dict[str, dict[str, Any]]


# -- request -------------------------------------------------------------------------------
def _text_of(part: dict[str, Any]) -> str:
    text = part.get("text")
    if text is None and part.get("type") == "refusal":
        text = part.get("refusal")
    if not isinstance(text, str):
        raise DialectError(f"a {part.get('type')!r} content part needs a string 'text'", param="input")
    return text


def _parts(content: Any, where: str) -> list[dict[str, Any]]:
    """Content (a string or Responses content parts) as chat parts (text and image_url)."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise DialectError(f"{where}: content must be a string or a list of content parts", param="input")
    out: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, str):
            out.append({"type": "text", "text": part})
            continue
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in _TEXT_PARTS or kind == "refusal":
            out.append({"type": "text", "text": _text_of(part)})
        elif kind == "input_image":
            url = part.get("image_url")
            if not url:
                raise DialectError(f"{where}: an input_image needs 'image_url' (a URL or data URL); uploaded "
                                   "files (file_id) are not served by the gateway", param="input")
            image: dict[str, Any] = {"url": url}
            if part.get("detail"):
                image["detail"] = part["detail"]
            out.append({"type": "image_url", "image_url": image})
        else:
            raise DialectError(f"{where}: content part type {kind!r} is not supported by the gateway "
                               "(it takes input_text, output_text, refusal and input_image)", param="input")
    return out


class _Builder:
    """Folds Responses items into chat messages, an assistant turn's items into one message."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self._assistant: dict[str, Any] | None = None

    def _current(self, *, reasoning: bool = False, text: bool = False) -> dict[str, Any]:
        cur = self._assistant
        # A new assistant turn starts when this item cannot follow what the turn already holds
        # (reasoning, then text, then tool calls: the order the gateway's own output has).
        if cur is None or (reasoning and ("reasoning_content" in cur or cur.get("content") is not None
                                          or cur.get("tool_calls"))) \
                or (text and (cur.get("content") is not None or cur.get("tool_calls"))):
            cur = {"role": "assistant", "content": None}
            self.messages.append(cur)
            self._assistant = cur
        return cur

    def end_turn(self) -> None:
        self._assistant = None

    def add(self, item: Any, lookup: Callable[[str], dict[str, Any] | None]) -> None:
        if isinstance(item, dict) and item.get("type") == "item_reference":
            ref = lookup(str(item.get("id")))
            if ref is None:
                raise DialectError(f"Item with id {item.get('id')!r} not found.", param="input", code="item_not_found")
            item = ref
        if not isinstance(item, dict):
            raise DialectError("each input item must be a JSON object", param="input")
        kind = item.get("type") or ("message" if "role" in item else None)
        if kind == "message":
            role = _ROLES.get(item.get("role", ""))
            if role is None:
                raise DialectError(f"message role {item.get('role')!r} is not one of user, system, developer, "
                                   "assistant", param="input")
            parts = _parts(item.get("content"), f"a {item.get('role')} message")
            if role == "assistant":
                if any(p["type"] != "text" for p in parts):
                    raise DialectError("an assistant message can only hold text", param="input")
                self._current(text=True)["content"] = chat_content(parts, text_only=True)
                return
            self.end_turn()
            self.messages.append({"role": role, "content": chat_content(parts)})
        elif kind == "function_call":
            call_id, name = item.get("call_id"), item.get("name")
            if not isinstance(call_id, str) or not isinstance(name, str):
                raise DialectError("a function_call item needs 'call_id' and 'name'", param="input")
            arguments = item.get("arguments")
            # the API's field is the string the model wrote (a program may keep it parsed): never invented
            if not isinstance(arguments, str | dict):
                raise DialectError("a function_call item needs 'arguments', the string the model wrote, got "
                                   f"{arguments_text(arguments)[:80] or 'null'}", param="input")
            self._current().setdefault("tool_calls", []).append(chat_tool_call(call_id, name, arguments_text(arguments)))
        elif kind == "function_call_output":
            output = item.get("output")
            parts = _parts(output, "a function_call_output")
            if any(p["type"] != "text" for p in parts):
                raise DialectError("a function_call_output can only hold text here (the chat API's tool "
                                   "messages carry no images)", param="input")
            self.end_turn()
            self.messages.append({"role": "tool", "tool_call_id": str(item.get("call_id")),
                                  "content": chat_content(parts, text_only=True)})
        elif kind == "reasoning":
            # The reasoning text itself; a summary is not what the model wrote, so it is not replayed.
            texts = [_text_of(p) for p in (item.get("content") or []) if isinstance(p, dict)]
            self._current(reasoning=True)["reasoning_content"] = "".join(texts)
        else:
            raise DialectError(
                f"input item type {kind!r} is not supported by the gateway: it runs no built-in tools and "
                "takes message, function_call, function_call_output, reasoning and item_reference items",
                param="input")


def _tools(tools: Any) -> list[dict[str, Any]] | None:
    if not tools:
        return None
    if not isinstance(tools, list):
        raise DialectError("'tools' must be a list", param="tools")
    out = []
    for tool in tools:
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind != "function":
            raise DialectError(
                f"tool type {kind!r} is a built-in tool the gateway cannot run (it has no web search, file "
                "search, computer, code interpreter or hosted MCP): give the program function tools",
                param="tools", code="unsupported_tool")
        out.append(function_tool(tool.get("name"), tool.get("description"), tool.get("parameters"),
                                 strict=tool.get("strict")))
    return out


def _tool_choice(choice: Any) -> Any:
    if choice is None or isinstance(choice, str):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and choice.get("name"):
        return named_tool_choice(choice["name"])
    raise DialectError(f"tool_choice {choice!r} is not supported by the gateway: use 'auto', 'none', 'required' "
                       "or {'type': 'function', 'name': ...}", param="tool_choice")


def _response_format(text: Any) -> dict[str, Any] | None:
    fmt = (text or {}).get("format") if isinstance(text, dict) else None
    if not isinstance(fmt, dict) or fmt.get("type") in (None, "text"):
        return None
    if fmt["type"] == "json_object":
        return {"type": "json_object"}
    if fmt["type"] == "json_schema":
        schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if fmt.get(k) is not None}
        return {"type": "json_schema", "json_schema": schema}
    raise DialectError(f"text.format type {fmt['type']!r} is not supported", param="text.format")


def to_chat(body: dict[str, Any], stored: Mapping[str, StoredResponse]) -> ResponsesRequest:
    """The chat body for a Responses request (raises `DialectError` for what cannot be served)."""
    for key, what in (("conversation", "the Conversations API"), ("prompt", "stored prompts"),
                      ("background", "background responses")):
        if body.get(key):
            raise DialectError(f"{what} ('{key}') are not served by the gateway: send the input (or use "
                               "previous_response_id)", param=key)
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise DialectError("'instructions' must be a string", param="instructions")
    items: dict[str, dict[str, Any]] = {}
    prev_id = body.get("previous_response_id")
    history: list[dict[str, Any]] = []
    if prev_id is not None:
        prev = stored.get(prev_id)
        if prev is None:
            raise DialectError(f"Previous response with id '{prev_id}' not found.", param="previous_response_id",
                               code="previous_response_not_found")
        history = list(prev.history)

    def lookup(item_id: str) -> dict[str, Any] | None:
        for response in stored.values():
            if item_id in response.items:
                return response.items[item_id]
        return items.get(item_id)

    builder = _Builder()
    raw = body.get("input")
    if isinstance(raw, str):
        builder.add({"role": "user", "content": raw}, lookup)
    elif isinstance(raw, list):
        for item in raw:
            builder.add(item, lookup)
            if isinstance(item, dict) and isinstance(item.get("id"), str):
                items[item["id"]] = item
    elif raw is not None:
        raise DialectError("'input' must be a string or a list of input items", param="input")
    history.extend(builder.messages)
    messages = ([{"role": "system", "content": instructions}] if instructions else []) + history
    if not messages:
        raise DialectError("nothing to answer: 'input' is empty and there is no previous response", param="input")
    chat: dict[str, Any] = {"messages": messages}
    tools = _tools(body.get("tools"))
    if tools:
        chat["tools"] = tools
    for key, value in (("tool_choice", _tool_choice(body.get("tool_choice"))),
                       ("parallel_tool_calls", body.get("parallel_tool_calls")),
                       ("response_format", _response_format(body.get("text")))):
        if value is not None:
            chat[key] = value
    if "message.output_text.logprobs" in (body.get("include") or []):
        chat["logprobs"] = True
    return ResponsesRequest(chat=chat, history=history, body=body, items=items)


# -- reply ---------------------------------------------------------------------------------
def _logprobs(content: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"token": t.get("token", ""), "bytes": t.get("bytes") or [], "logprob": t.get("logprob", 0.0),
             "top_logprobs": t.get("top_logprobs") or []} for t in content]


def output_items(chat_reply: dict[str, Any]) -> list[dict[str, Any]]:
    """The output items of a chat reply: reasoning, the text message, one function_call per tool call."""
    reply = read_reply(chat_reply)
    done = "incomplete" if reply.finish_reason in _INCOMPLETE else "completed"
    out: list[dict[str, Any]] = []
    if reply.reasoning:
        out.append({"id": new_id("rs"), "type": "reasoning", "summary": [],
                    "content": [{"type": "reasoning_text", "text": reply.reasoning}], "status": done})
    if reply.text or not reply.calls:
        out.append({"id": new_id("msg"), "type": "message", "role": "assistant", "status": done, "content": [
            {"type": "output_text", "text": reply.text, "annotations": [], "logprobs": _logprobs(reply.logprobs)}]})
    for call in reply.calls:  # the model's argument text as it was, valid JSON or not (core)
        out.append({"id": new_id("fc"), "type": "function_call", "call_id": call.id or new_id("call"),
                    "name": call.name, "arguments": call.text, "status": done})
    return out


def response_object(chat_reply: dict[str, Any], request: ResponsesRequest, model: str,
                    sampling: Mapping[str, Any]) -> dict[str, Any]:
    """The Response object for a chat reply (what ``POST /responses`` answers)."""
    body = request.body
    finish = chat_reply["choices"][0].get("finish_reason")
    usage = chat_reply.get("usage") or {}
    prompt, completion = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
    now = time.time()
    reason = _INCOMPLETE.get(finish or "")
    return {
        "id": new_id("resp"), "object": "response", "created_at": int(now), "completed_at": int(now),
        "status": "incomplete" if reason else "completed", "error": None,
        "incomplete_details": {"reason": reason} if reason else None,
        "instructions": body.get("instructions"), "max_output_tokens": body.get("max_output_tokens"),
        "model": model, "output": output_items(chat_reply),
        "parallel_tool_calls": body.get("parallel_tool_calls") is not False,
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": {"effort": None, "summary": None}, "store": body.get("store", True) is not False,
        "temperature": sampling.get("temperature", 1.0), "top_p": sampling.get("top_p", 1.0),
        "text": body.get("text") or {"format": {"type": "text"}},
        "tool_choice": body.get("tool_choice") or "auto", "tools": body.get("tools") or [],
        "truncation": "disabled", "metadata": body.get("metadata") or {}, "user": None,
        "usage": {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                  "output_tokens": completion, "output_tokens_details": {"reasoning_tokens": 0},
                  "total_tokens": prompt + completion},
    }


def stored_response(response: dict[str, Any], request: ResponsesRequest) -> StoredResponse:
    """What a follow-up with ``previous_response_id`` continues: the input's messages and the reply.

    The reply is read back from the response's output items, as a program resending them
    would send it, so both ways of continuing make the same chat messages.
    """
    items = dict(request.items)
    items.update({item["id"]: item for item in response["output"]})
    builder = _Builder()
    for item in response["output"]:
        builder.add(item, items.get)
    return StoredResponse(response=response, history=[*request.history, *builder.messages], items=items)


# -- streaming -----------------------------------------------------------------------------
def sse_events(response: dict[str, Any]) -> list[bytes]:
    """The Responses event stream of a complete response, ``response.created`` to ``response.completed``."""
    events: list[bytes] = []

    def emit(kind: str, **fields: Any) -> None:
        events.append(sse_event({"type": kind, "sequence_number": len(events), **fields}, kind))

    start = {**response, "status": "in_progress", "output": [], "usage": None, "completed_at": None,
             "incomplete_details": None}
    emit("response.created", response=start)
    emit("response.in_progress", response=start)
    for index, item in enumerate(response["output"]):
        item_id = item["id"]
        if item["type"] == "message":
            emit("response.output_item.added", output_index=index,
                 item={**item, "status": "in_progress", "content": []})
            for c_index, part in enumerate(item["content"]):
                ids = {"item_id": item_id, "output_index": index, "content_index": c_index}
                emit("response.content_part.added", **ids, part={**part, "text": "", "logprobs": []})
                delta_lp = [{"token": t["token"], "logprob": t["logprob"], "top_logprobs": t["top_logprobs"]}
                            for t in part.get("logprobs") or []]
                if part["text"]:
                    emit("response.output_text.delta", **ids, delta=part["text"], logprobs=delta_lp)
                emit("response.output_text.done", **ids, text=part["text"], logprobs=delta_lp)
                emit("response.content_part.done", **ids, part=part)
        elif item["type"] == "function_call":
            emit("response.output_item.added", output_index=index,
                 item={**item, "status": "in_progress", "arguments": ""})
            if item["arguments"]:
                emit("response.function_call_arguments.delta", item_id=item_id, output_index=index,
                     delta=item["arguments"])
            emit("response.function_call_arguments.done", item_id=item_id, output_index=index,
                 name=item["name"], arguments=item["arguments"])
        elif item["type"] == "reasoning":
            emit("response.output_item.added", output_index=index,
                 item={**item, "status": "in_progress", "content": []})
            for c_index, part in enumerate(item.get("content") or []):
                ids = {"item_id": item_id, "output_index": index, "content_index": c_index}
                emit("response.content_part.added", **ids, part={**part, "text": ""})
                emit("response.reasoning_text.delta", **ids, delta=part["text"])
                emit("response.reasoning_text.done", **ids, text=part["text"])
                emit("response.content_part.done", **ids, part=part)
        emit("response.output_item.done", output_index=index, item=item)
    emit("response.incomplete" if response["status"] == "incomplete" else "response.completed", response=response)
    return events
