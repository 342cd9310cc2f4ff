"""What the gateway accepts from a program, checked before anything is translated or sampled.

An agent program is code the policy may have steered, and its SDK is not the only thing that
can talk to the gateway: any body can arrive. Every body is bounded (`MAX_BODY_BYTES`,
`MAX_DEPTH`) and every field the gateway reads is checked for its type here, so a body it
cannot take is a 4xx in the dialect's own error shape naming the field (``messages[2].content``),
never an exception inside the translation that the web framework would answer with a 500.
"""

from __future__ import annotations

import json
from typing import Any

from verifiers.gateway.dialects import DialectError

MAX_BODY_BYTES = 32 * 1024 * 1024
"""The largest request body the gateway reads (a longer one is a 413): far above any real call."""
MAX_DEPTH = 64
"""The deepest nesting of arrays and objects a body may have (deeper: a 400; real calls nest < 10)."""
ROLES = ("system", "user", "assistant", "tool", "developer", "function")
_NUMBER = (int, float)


class BodyError(Exception):
    """A body the gateway cannot read: ``status`` (400 or 413) and what is wrong with it."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def parse_body(raw: bytes) -> dict[str, Any]:
    """The JSON object in ``raw``, within the depth limit; `BodyError` saying what is wrong otherwise."""
    try:
        body = json.loads(raw)
    except RecursionError:
        raise BodyError(400, f"the request body nests deeper than {MAX_DEPTH} levels") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BodyError(400, f"the request body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BodyError(400, "the request body must be a JSON object")
    if depth(body) > MAX_DEPTH:
        raise BodyError(400, f"the request body nests deeper than {MAX_DEPTH} levels")
    return body


def depth(value: Any) -> int:
    """How deep arrays and objects nest in ``value`` (without recursion: the input is hostile)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        if deepest > MAX_DEPTH:
            return deepest
        stack.extend((child, level + 1) for child in children)
    return deepest


def _fail(param: str, what: str, value: Any) -> DialectError:
    shown = json.dumps(value, ensure_ascii=False)[:80] if _jsonable(value) else type(value).__name__
    return DialectError(f"'{param}' must be {what}, got {shown}", param=param)


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def _optional(body: dict[str, Any], key: str, types: tuple[type, ...], what: str, prefix: str = "") -> None:
    value = body.get(key)
    if value is not None and (not isinstance(value, types) or (isinstance(value, bool) and bool not in types)):
        raise _fail(prefix + key, what, value)


def check_sampling(body: dict[str, Any]) -> None:
    """The sampling fields every dialect passes on: numbers are numbers, flags are flags."""
    for key in ("temperature", "top_p", "frequency_penalty", "presence_penalty"):
        _optional(body, key, _NUMBER, "a number")
    for key in ("max_tokens", "max_completion_tokens", "max_output_tokens", "n", "seed", "top_logprobs", "top_k"):
        _optional(body, key, (int,), "an integer")
    for key in ("stream", "logprobs", "store", "parallel_tool_calls"):
        _optional(body, key, (bool,), "true or false")
    stop = body.get("stop")
    if stop is not None and not isinstance(stop, str) and not (
            isinstance(stop, list) and all(isinstance(s, str) for s in stop)):
        raise _fail("stop", "a string or a list of strings", stop)
    _optional(body, "stream_options", (dict,), "an object")


def check_chat(body: dict[str, Any]) -> None:
    """A chat-completions body (a program's, or a dialect's translation): `DialectError` naming the field."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _fail("messages", "a non-empty list of chat messages", messages)
    for i, message in enumerate(messages):
        _check_message(message, f"messages[{i}]")
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise _fail("tools", "a list of tools", tools)
        for i, tool in enumerate(tools):
            fn = tool.get("function") if isinstance(tool, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                raise _fail(f"tools[{i}]", 'a function tool ({"type": "function", "function": {"name": ...}})', tool)
            _optional(fn, "parameters", (dict,), "a JSON schema object", f"tools[{i}].function.")
            _optional(fn, "description", (str,), "a string", f"tools[{i}].function.")
    choice = body.get("tool_choice")
    if choice is not None and choice not in ("auto", "none", "required") and not (
            isinstance(choice, dict) and isinstance((choice.get("function") or {}).get("name"), str)):
        raise _fail("tool_choice", '"auto", "none", "required" or {"type": "function", "function": {"name": ...}}',
                    choice)
    check_sampling(body)


def _check_message(message: Any, where: str) -> None:
    if not isinstance(message, dict):
        raise _fail(where, "a message object", message)
    role = message.get("role")
    if role not in ROLES:
        raise _fail(f"{where}.role", f"one of {', '.join(ROLES)}", role)
    content = message.get("content")
    if isinstance(content, list):
        for j, part in enumerate(content):
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise _fail(f"{where}.content[{j}]", 'a content part ({"type": "text", "text": ...})', part)
            if part["type"] == "text" and not isinstance(part.get("text"), str):
                raise _fail(f"{where}.content[{j}].text", "a string", part.get("text"))
    elif content is not None and not isinstance(content, str):
        raise _fail(f"{where}.content", "a string, a list of content parts or null", content)
    for key in ("name", "tool_call_id", "reasoning_content"):
        _optional(message, key, (str,), "a string", f"{where}.")
    calls = message.get("tool_calls")
    if calls is None:
        return
    if not isinstance(calls, list):
        raise _fail(f"{where}.tool_calls", "a list of tool calls", calls)
    for j, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise _fail(f"{where}.tool_calls[{j}]", 'a call ({"type": "function", "function": {"name": ...}})', call)
        if not isinstance(fn.get("arguments"), str):
            raise _fail(f"{where}.tool_calls[{j}].function.arguments", "a string (the arguments as the model wrote "
                        "them)", fn.get("arguments"))
        _optional(call, "id", (str,), "a string", f"{where}.tool_calls[{j}].")
