"""Seeded three-operand integer arithmetic questions (``a op b op c``, usual precedence)."""

from __future__ import annotations

import random
from typing import Any

__all__ = ["make_examples", "make_question"]

_OPS = "+-*"


def make_question(rng: random.Random, max_operand: int) -> tuple[str, int]:
    """``("a op b op c", value)`` with operands in ``1..max_operand``.

    The value is computed from the same tokens with ``*`` first, by hand rather than
    with ``eval``, so the answer cannot disagree with the shown expression.
    """
    a, b, c = (rng.randint(1, max_operand) for _ in range(3))
    op1, op2 = rng.choice(_OPS), rng.choice(_OPS)
    terms: list[int] = [a]
    signs: list[int] = [1]
    for op, value in ((op1, b), (op2, c)):
        if op == "*":
            terms[-1] *= value
        else:
            terms.append(value)
            signs.append(1 if op == "+" else -1)
    value = sum(s * t for s, t in zip(signs, terms, strict=True))
    return f"{a} {op1} {b} {op2} {c}", value


def make_examples(
    n: int, rng: random.Random, max_operand: int, exclude: set[str] | None = None
) -> list[dict[str, Any]]:
    """``n`` questions with distinct expressions (none of them in ``exclude``, which is updated)."""
    seen = exclude if exclude is not None else set()
    rows: list[dict[str, Any]] = []
    misses = 0
    while len(rows) < n:
        expression, value = make_question(rng, max_operand)
        if expression in seen and misses < 50:  # tiny operand ranges: allow repeats rather than loop
            misses += 1
            continue
        misses = 0
        seen.add(expression)
        rows.append(
            {"question": f"What is {expression}?", "answer": str(value), "info": {"expression": expression}}
        )
    return rows
