"""agent-arithmetic's reward and metrics, read from what the program printed and the calls it made."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["boxed_answer", "correct_answer", "model_calls"]

_BOXED = re.compile(r"\\boxed\{\s*(-?\d+)\s*\}")


def _printed_integer(state: dict[str, Any]) -> str | None:
    """The last ``\\boxed{}`` integer the program printed (None: it printed none)."""
    found = _BOXED.findall(str((state.get("agent") or {}).get("stdout") or ""))
    return found[-1] if found else None


def correct_answer(state: dict[str, Any], answer: str, **_: Any) -> float:
    """1.0 when the program's printed final answer is the problem's integer."""
    value = _printed_integer(state)
    return float(value is not None and int(value) == int(answer))


def boxed_answer(state: dict[str, Any], **_: Any) -> float:
    """1.0 when the printed answer holds a ``\\boxed{}`` integer at all (format, right or wrong)."""
    return float(_printed_integer(state) is not None)


def model_calls(state: dict[str, Any], **_: Any) -> float:
    """Model calls the program made (2 with the check, 1 without)."""
    return float((state.get("agent") or {}).get("num_calls", 0))
