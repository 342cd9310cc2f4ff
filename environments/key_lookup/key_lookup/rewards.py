"""key-lookup's reward functions and metrics: each reads the finished episode, never drives it.

``correct_answer`` is the reward; the others are metrics (weight 0 by default) that say where
an episode went wrong: no call, a call with the wrong key, a call that failed, or a wrong
answer after a good call.
"""

from __future__ import annotations

from typing import Any

from verifiers.errors import ToolError
from verifiers.tools.execution import parse_arguments, parse_tool_call

__all__ = ["correct_answer", "model_turns", "right_key_called", "tool_call_ran"]


def _assistant_turns(completion: Any) -> list[dict[str, Any]]:
    if isinstance(completion, str):
        return []
    return [m for m in completion if m.get("role") == "assistant"]


def _called_keys(completion: Any) -> list[Any]:
    """The ``key`` argument of every well-formed ``lookup`` call, in order."""
    keys = []
    for m in _assistant_turns(completion):
        for tc in m.get("tool_calls") or []:
            try:
                _, name, raw = parse_tool_call(tc)
                args = parse_arguments(name, raw)
            except ToolError:
                continue
            if name == "lookup":
                keys.append(args.get("key"))
    return keys


def correct_answer(completion: Any, answer: str) -> float:
    """1.0 when the last model turn answers (no tool call) with exactly the asked key's value."""
    turns = _assistant_turns(completion)
    if not turns or turns[-1].get("tool_calls"):
        return 0.0
    return float(str(turns[-1].get("content") or "").strip() == answer)


def right_key_called(completion: Any, info: dict[str, Any]) -> float:
    """1.0 when the model called ``lookup`` with the asked key (partial credit when weighted)."""
    return float(info.get("key") in _called_keys(completion))


def tool_call_ran(completion: Any, state: dict[str, Any]) -> float:
    """1.0 when the episode has a tool result and no tool call failed (parsed and ran)."""
    if isinstance(completion, str) or state.get("tool_errors"):
        return 0.0
    return float(any(m.get("role") == "tool" for m in completion))


def model_turns(completion: Any) -> float:
    """How many turns the model took (a metric: a successful episode takes 2)."""
    return float(len(_assistant_turns(completion)))
