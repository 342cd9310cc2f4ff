"""Carry out one tool call from a model's message.

Every failure becomes a `ToolError` subclass whose message is written for the model:
it says what was wrong and how to fix it, because the environment sends it back as the
tool message and the model gets another turn to correct itself.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel

from verifiers.errors import (
    ToolArgumentsError,
    ToolError,
    ToolExecutionError,
    ToolNotFoundError,
    ToolTimeoutError,
)

__all__ = [
    "call_tool",
    "default_error_formatter",
    "format_tool_result",
    "parse_arguments",
    "parse_tool_call",
]

_QUOTE_CHARS = 200


def _quote(raw: Any) -> str:
    """The model's arguments, shortened: enough to recognise them, not enough to flood the context."""
    text = raw if isinstance(raw, str) else repr(raw)
    if len(text) > _QUOTE_CHARS:
        return f"{text[:_QUOTE_CHARS]}... ({len(text)} chars)"
    return text


def parse_arguments(name: str, raw_arguments: str | Mapping[str, Any] | None) -> dict[str, Any]:
    """Decode the model's arguments into a dict; `None` and blank strings mean "no arguments"."""
    if raw_arguments is None:
        return {}
    if isinstance(raw_arguments, Mapping):
        return dict(raw_arguments)
    if not isinstance(raw_arguments, str):
        raise ToolArgumentsError(
            f"Arguments for tool {name!r} must be a JSON object string, got {type(raw_arguments).__name__}: "
            f"{_quote(raw_arguments)}"
        )
    if not raw_arguments.strip():
        return {}
    try:
        decoded = json.loads(raw_arguments)
    except json.JSONDecodeError as exc:
        raise ToolArgumentsError(
            f"Arguments for tool {name!r} are not valid JSON ({exc.msg} at line {exc.lineno} column "
            f"{exc.colno}): {_quote(raw_arguments)}"
        ) from None
    if not isinstance(decoded, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
            type(decoded), "a number"
        )
        raise ToolArgumentsError(
            f'Arguments for tool {name!r} must be a JSON object like {{"arg": value}}, got {kind}: '
            f"{_quote(raw_arguments)}"
        )
    return decoded


def _check_signature(fn: Callable[..., Any], name: str, args: dict[str, Any], hidden: set[str]) -> None:
    """Name every missing and unexpected argument at once, so one retry can fix them all.

    `hidden` (injected) parameters are left out of the "expected" list: the model never
    saw them in the schema and cannot pass them.
    """
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # some builtins have no signature: let the call decide
        return
    params = signature.parameters
    takes_kwargs = any(p.kind is p.VAR_KEYWORD for p in params.values())
    by_name = {n: p for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    missing = [n for n, p in by_name.items() if p.default is p.empty and n not in args]
    unexpected = [] if takes_kwargs else [n for n in args if n not in by_name]
    if not missing and not unexpected:
        try:
            signature.bind(**args)
        except TypeError as exc:
            raise ToolArgumentsError(f"Invalid arguments for tool {name!r}: {exc}") from None
        return
    problems = []
    if missing:
        problems.append(f"missing required argument(s): {', '.join(missing)}")
    if unexpected:
        problems.append(f"unexpected argument(s): {', '.join(unexpected)}")
    expected = [n for n in by_name if n not in hidden]
    raise ToolArgumentsError(
        f"Invalid arguments for tool {name!r}: {'; '.join(problems)}. "
        f"Expected arguments: {', '.join(expected) or '(none)'}."
    )


async def _invoke(fn: Callable[..., Any], args: dict[str, Any]) -> Any:
    """Run the tool, turning its own exceptions into ToolExecutionError.

    Converting here, inside the timeout, means a TimeoutError raised by the tool itself
    is reported as the tool's failure, not as our time limit.
    """
    try:
        if inspect.iscoroutinefunction(fn):
            result = await fn(**args)
        else:
            # Sync tools may block (HTTP, subprocess, heavy CPU): keep the event loop free.
            result = await asyncio.to_thread(fn, **args)
            if inspect.isawaitable(result):  # e.g. an object whose __call__ is async
                result = await result
    except ToolError:
        raise  # the tool already wrote a message for the model
    except Exception as exc:
        raise ToolExecutionError(f"{type(exc).__name__}: {exc}") from exc
    return result


async def call_tool(
    tools: Mapping[str, Callable[..., Any]],
    name: str,
    raw_arguments: str | Mapping[str, Any] | None,
    timeout_s: float | None = None,
    extra_args: Mapping[str, Any] | None = None,
) -> Any:
    """Look up `name`, check the model's arguments against its signature and run it.

    `extra_args` are injected by the environment (state, sandbox handles, ...) and win
    over anything the model passed under the same name. A sync tool that times out keeps
    running in its worker thread (threads cannot be killed); only the wait is abandoned.
    """
    fn = tools.get(name)
    if fn is None:
        available = ", ".join(sorted(tools)) or "(none)"
        raise ToolNotFoundError(f"Unknown tool {name!r}. Available tools: {available}.")
    args = parse_arguments(name, raw_arguments)
    hidden = set(extra_args or ())
    if extra_args:
        args.update(extra_args)
    _check_signature(fn, name, args, hidden)
    try:
        return await asyncio.wait_for(_invoke(fn, args), timeout=timeout_s)
    except TimeoutError:
        raise ToolTimeoutError(f"Tool {name!r} timed out after {timeout_s:g} s.") from None


def format_tool_result(value: Any) -> str:
    """Tool message content for a return value: text as is, JSON when possible, else str()."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


def default_error_formatter(err: Exception) -> str:
    """Tool message content for a failed call; the model sees this and can retry.

    The exception's type is part of it (``Error: ValueError: ...``): a bare message such as
    ``'x'`` (a KeyError) tells the model nothing.
    """
    if isinstance(err, ToolError):
        return f"Error: {err}"
    return f"Error: {type(err).__name__}: {err}"


def _field(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, Mapping) else getattr(obj, key, None)


def parse_tool_call(tool_call: Any) -> tuple[str, str, str]:
    """(id, name, raw arguments) from an OpenAI-format dict or an openai SDK object.

    Arguments that a provider already decoded into a dict are re-encoded, so callers
    always get the JSON text the model produced (or its equivalent).
    """
    function = _field(tool_call, "function")
    name = _field(function, "name") if function is not None else None
    if not isinstance(name, str) or not name:
        raise ToolArgumentsError(f"Malformed tool call (no function name): {_quote(tool_call)}")
    call_id = _field(tool_call, "id") or ""
    arguments = _field(function, "arguments")
    if arguments is None:
        arguments = ""
    elif not isinstance(arguments, str):
        try:
            arguments = json.dumps(arguments)
        except (TypeError, ValueError):
            arguments = str(arguments)
    return str(call_id), name, arguments
