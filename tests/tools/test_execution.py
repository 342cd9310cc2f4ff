"""call_tool and helpers: every failure is a ToolError with a message for the model."""

from __future__ import annotations

import asyncio
import json
import threading
from types import SimpleNamespace
from typing import Any

import pytest

from verifiers.errors import (
    ToolArgumentsError,
    ToolExecutionError,
    ToolNotFoundError,
    ToolTimeoutError,
)
from verifiers.tools.execution import (
    call_tool,
    default_error_formatter,
    format_tool_result,
    parse_tool_call,
)


def add(a: int, b: int = 0) -> int:
    """Add."""
    return a + b


async def slow(seconds: float) -> str:
    """Sleep."""
    await asyncio.sleep(seconds)
    return "done"


def boom() -> None:
    """Fail."""
    raise ValueError("bad value")


def which_thread() -> str:
    """Name of the thread running the tool."""
    return threading.current_thread().name


def with_state(x: int, state: dict[str, Any]) -> int:
    """Uses hidden state."""
    return x + state["offset"]


TOOLS = {f.__name__: f for f in (add, slow, boom, which_thread, with_state)}


async def test_runs_sync_and_async_tools() -> None:
    assert await call_tool(TOOLS, "add", '{"a": 2, "b": 3}') == 5
    assert await call_tool(TOOLS, "add", {"a": 2}) == 2
    assert await call_tool(TOOLS, "slow", '{"seconds": 0}') == "done"


async def test_empty_arguments_mean_no_arguments() -> None:
    for raw in (None, "", "  "):
        assert await call_tool(TOOLS, "which_thread", raw) != threading.current_thread().name


async def test_sync_tool_runs_in_a_worker_thread() -> None:
    assert await call_tool(TOOLS, "which_thread", "{}") != threading.current_thread().name


async def test_malformed_json_quotes_truncated_arguments() -> None:
    raw = '{"a": 1,' + " " * 500
    with pytest.raises(ToolArgumentsError, match="not valid JSON") as info:
        await call_tool(TOOLS, "add", raw)
    message = str(info.value)
    assert '{"a": 1,' in message
    assert len(message) < 400
    assert "chars)" in message


async def test_non_object_json() -> None:
    with pytest.raises(ToolArgumentsError, match=r"must be a JSON object.*an array"):
        await call_tool(TOOLS, "add", "[1, 2]")
    with pytest.raises(ToolArgumentsError, match="a number"):
        await call_tool(TOOLS, "add", "3")


async def test_unknown_tool_lists_available() -> None:
    with pytest.raises(ToolNotFoundError, match=r"'nope'.*add, boom, slow"):
        await call_tool(TOOLS, "nope", "{}")


async def test_missing_and_unexpected_arguments_are_named() -> None:
    with pytest.raises(ToolArgumentsError) as info:
        await call_tool(TOOLS, "add", '{"b": 1, "c": 2, "d": 3}')
    message = str(info.value)
    assert "missing required argument(s): a" in message
    assert "unexpected argument(s): c, d" in message
    assert "Expected arguments: a, b" in message


async def test_exception_in_tool_is_chained() -> None:
    with pytest.raises(ToolExecutionError, match=r"^ValueError: bad value$") as info:
        await call_tool(TOOLS, "boom", None)
    assert isinstance(info.value.__cause__, ValueError)


async def test_tool_raising_timeout_error_is_not_our_timeout() -> None:
    async def flaky() -> None:
        """Times out on its own."""
        raise TimeoutError("upstream")

    with pytest.raises(ToolExecutionError, match="TimeoutError: upstream"):
        await call_tool({"flaky": flaky}, "flaky", None, timeout_s=5)


async def test_timeout() -> None:
    with pytest.raises(ToolTimeoutError, match=r"'slow' timed out after 0.05 s"):
        await call_tool(TOOLS, "slow", '{"seconds": 5}', timeout_s=0.05)


async def test_extra_args_are_injected_and_win() -> None:
    extra = {"state": {"offset": 10}}
    assert await call_tool(TOOLS, "with_state", '{"x": 1}', extra_args=extra) == 11
    # The model cannot override an injected argument.
    raw = json.dumps({"x": 1, "state": {"offset": 1000}})
    assert await call_tool(TOOLS, "with_state", raw, extra_args=extra) == 11
    # Hidden parameters are not advertised back to the model.
    with pytest.raises(ToolArgumentsError, match=r"Expected arguments: x\.$"):
        await call_tool(TOOLS, "with_state", '{"y": 1}', extra_args=extra)


def test_format_tool_result() -> None:
    assert format_tool_result("text") == "text"
    assert format_tool_result(None) == ""
    assert format_tool_result({"a": [1, 2]}) == '{"a": [1, 2]}'
    assert format_tool_result(3) == "3"
    assert format_tool_result({1, 2}) in ("{1, 2}", "{2, 1}")


def test_default_error_formatter() -> None:
    assert default_error_formatter(ToolNotFoundError("Unknown tool 'x'.")) == "Error: Unknown tool 'x'."


def test_parse_tool_call_dict_and_object() -> None:
    as_dict = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}}
    assert parse_tool_call(as_dict) == ("call_1", "add", '{"a": 1}')
    as_obj = SimpleNamespace(id="call_2", function=SimpleNamespace(name="add", arguments=None))
    assert parse_tool_call(as_obj) == ("call_2", "add", "")
    decoded = {"id": "c", "function": {"name": "add", "arguments": {"a": 1}}}
    assert parse_tool_call(decoded) == ("c", "add", '{"a": 1}')
    with pytest.raises(ToolArgumentsError, match="no function name"):
        parse_tool_call({"id": "c", "function": {}})


def test_parse_tool_call_openai_object() -> None:
    openai_types = pytest.importorskip("openai.types.chat")
    call = openai_types.ChatCompletionMessageToolCall(
        id="call_3", type="function", function={"name": "add", "arguments": '{"a": 2}'}
    )
    assert parse_tool_call(call) == ("call_3", "add", '{"a": 2}')
