"""Tools: function → schema, tool-call execution, and a Python sandbox."""

from verifiers.tools.execution import (
    call_tool,
    default_error_formatter,
    format_tool_result,
    parse_arguments,
    parse_tool_call,
)
from verifiers.tools.sandbox import SandboxLimits, SandboxResult, python_tool, run_python, run_python_sync
from verifiers.tools.schema import parse_docstring, tool_schema

__all__ = [
    "SandboxLimits",
    "SandboxResult",
    "call_tool",
    "default_error_formatter",
    "format_tool_result",
    "parse_arguments",
    "parse_docstring",
    "parse_tool_call",
    "python_tool",
    "run_python",
    "run_python_sync",
    "tool_schema",
]
