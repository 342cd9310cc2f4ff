"""Seeded generation of integer arithmetic problems.

Values are computed exactly with `fractions.Fraction` from the generated tokens (never
``eval``), and a problem whose value is not an integer is drawn again, so every answer
is a whole number that MathRubric can compare without rounding questions.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

__all__ = ["ALLOWED_OPERATIONS", "Problem", "evaluate", "make_examples", "make_problem"]

ALLOWED_OPERATIONS = frozenset("+-*/")


@dataclass(frozen=True, slots=True)
class Problem:
    operands: tuple[int, ...]
    operators: tuple[str, ...]

    @property
    def expression(self) -> str:
        parts = [_show(self.operands[0])]
        for op, value in zip(self.operators, self.operands[1:], strict=True):
            parts += [op, _show(value)]
        return " ".join(parts)


def _show(value: int) -> str:
    """Negative operands in parentheses, so ``3 - -4`` reads as ``3 - (-4)``."""
    return f"({value})" if value < 0 else str(value)


def evaluate(operands: tuple[int, ...], operators: tuple[str, ...]) -> Fraction:
    """Exact value with the usual precedence (``*`` and ``/`` before ``+`` and ``-``, left to right).

    Raises ZeroDivisionError for a division by zero.
    """
    total = Fraction(0)
    sign = 1
    term = Fraction(operands[0])
    for op, value in zip(operators, operands[1:], strict=True):
        if op == "*":
            term *= value
        elif op == "/":
            term /= value
        else:
            total += sign * term
            sign = 1 if op == "+" else -1
            term = Fraction(value)
    return total + sign * term


def make_problem(
    rng: random.Random, operations: str, num_terms: int, min_operand: int, max_operand: int
) -> tuple[Problem, int]:
    """A random problem and its integer value.

    A divisor is drawn from the divisors of the operand before it, which makes most
    divisions exact; the rest are rejected and drawn again.
    """
    for _ in range(1000):
        operands = [rng.randint(min_operand, max_operand)]
        operators: list[str] = []
        for _ in range(num_terms - 1):
            op = rng.choice(operations)
            if op == "/":
                divisors = _divisors_in_range(operands[-1], min_operand, max_operand)
                if not divisors:
                    continue
                value = rng.choice(divisors)
            else:
                value = rng.randint(min_operand, max_operand)
            operators.append(op)
            operands.append(value)
        if len(operands) != num_terms:
            continue
        try:
            result = evaluate(tuple(operands), tuple(operators))
        except ZeroDivisionError:
            continue
        if result.denominator == 1:
            return Problem(tuple(operands), tuple(operators)), int(result)
    raise ValueError(
        f"could not generate an integer-valued problem with operations {operations!r} and operands in "
        f"[{min_operand}, {max_operand}]; widen the operand range"
    )


def _divisors_in_range(n: int, low: int, high: int) -> list[int]:
    """Non-zero divisors ``d`` of ``n`` (either sign) with ``low <= d <= high``."""
    if n == 0:  # everything divides 0: offer a few small divisors, lazily (the range may be huge)
        candidates = (d for d in range(max(low, -50), min(high, 50) + 1) if d != 0)
        return list(candidates)
    out = []
    m = abs(n)
    d = 1
    while d * d <= m:
        if m % d == 0:
            for q in {d, m // d}:
                out += [x for x in (q, -q) if low <= x <= high]
        d += 1
    return sorted(out)


def make_examples(
    n: int,
    rng: random.Random,
    operations: str,
    num_terms: int,
    min_operand: int,
    max_operand: int,
    exclude: set[str] | None = None,
) -> list[dict[str, Any]]:
    """``n`` examples with distinct expressions (none of them in ``exclude``, which is updated).

    When the operand range is too small to give ``n`` distinct expressions, repeats are
    allowed rather than failing: a tiny range is a legitimate (easy) setting.
    """
    seen = exclude if exclude is not None else set()
    rows: list[dict[str, Any]] = []
    misses = 0
    while len(rows) < n:
        problem, value = make_problem(rng, operations, num_terms, min_operand, max_operand)
        expression = problem.expression
        if expression in seen and misses < 50:
            misses += 1
            continue
        misses = 0
        seen.add(expression)
        rows.append(
            {
                "question": f"What is {expression}?",
                "answer": str(value),
                "info": {"expression": expression},
            }
        )
    return rows
