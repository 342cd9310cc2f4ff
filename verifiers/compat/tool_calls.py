"""Tool calls that read like the openai SDK's objects: the 0.1.x-era path of `verifiers.types.ToolCall`.

The classes live in `verifiers.types` (the core's message types); these are the same
objects, so pickles that name ``verifiers.compat.tool_calls.ToolCall`` (checkpoints
written before the move) still load, and new pickles name ``verifiers.types.ToolCall``.
"""

from __future__ import annotations

from verifiers.types import AttrDict, FunctionCall, ToolCall, as_tool_calls

__all__ = ["AttrDict", "FunctionCall", "ToolCall", "as_tool_calls"]
