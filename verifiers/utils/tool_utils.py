"""0.1.x path ``verifiers.utils.tool_utils``: a Python function as an OpenAI tool schema.

Upstream built the schema with the ``openai-agents`` package; here it comes from
`verifiers.tools.schema.tool_schema`, which reproduces that text byte for byte
(strict, per-parameter titles, every parameter required) and is the builder ToolEnv
uses, so a schema made by hand with this helper matches the one the environment sends.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from verifiers.tools.schema import tool_schema

__all__ = ["convert_func_to_oai_tool"]


def convert_func_to_oai_tool(func: Callable[..., Any]) -> dict[str, Any]:
    """``{"type": "function", "function": {"name", "description", "parameters", "strict"}}`` for ``func``."""
    return tool_schema(func)
