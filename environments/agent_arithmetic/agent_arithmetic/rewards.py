"""agent-arithmetic's reward and metrics, read from what the program printed and the calls it made."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["boxed_answer", "correct_answer", "model_calls", "printed_answer"]

_BOXED = re.compile(r"\\boxed\{\s*(-?\d+)\s*\}", re.IGNORECASE)
_INTEGER = re.compile(r"-?\d+")


def _printed(state: dict[str, Any]) -> str:
    return str((state.get("agent") or {}).get("stdout") or "")


def printed_answer(state: dict[str, Any]) -> int | None:
    """The program's final answer: the last ``\\boxed{}`` integer it printed, else the last integer
    (as arithmetic's MathRubric reads a reply without a box), else None."""
    text = _printed(state)
    found = _BOXED.findall(text) or _INTEGER.findall(text)
    return int(found[-1]) if found else None


def correct_answer(state: dict[str, Any], answer: str, **_: Any) -> float:
    """1.0 when the program's printed final answer is the problem's integer."""
    value = printed_answer(state)
    return float(value is not None and value == int(answer))


def boxed_answer(state: dict[str, Any], **_: Any) -> float:
    """1.0 when the printed answer holds a ``\\boxed{}`` integer (the format asked for, right or wrong)."""
    return float(bool(_BOXED.search(_printed(state))))


def model_calls(state: dict[str, Any], **_: Any) -> float:
    """Model calls the program made (2 with the check, 1 without)."""
    return float((state.get("agent") or {}).get("num_calls", 0))
