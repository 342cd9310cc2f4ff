"""Seeded multi-step word problems whose numbers are large enough to want a calculator.

Each template draws its numbers and writes the integer-only expression that answers
it; the answer is that expression's value (exact integer arithmetic, so no rounding
can make a correct model look wrong) and the expression is kept in
``info["solution"]`` as a reference solution.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from calculator.safe_eval import safe_eval

__all__ = ["TEMPLATES", "make_examples"]

Template = Callable[[random.Random], tuple[str, str]]
"""A template returns the question and an arithmetic expression that computes its answer."""


def _warehouse(rng: random.Random) -> tuple[str, str]:
    boxes, per_box, shipped = rng.randint(120, 980), rng.randint(12, 96), rng.randint(100, 5000)
    question = (
        f"A warehouse holds {boxes} boxes with {per_box} items in each box. "
        f"{shipped} items are shipped out. How many items are left?"
    )
    return question, f"{boxes} * {per_box} - {shipped}"


def _tickets(rng: random.Random) -> tuple[str, str]:
    adults, children = rng.randint(150, 900), rng.randint(80, 700)
    adult_price, child_price = rng.randint(18, 75), rng.randint(5, 17)
    question = (
        f"A theatre sold {adults} adult tickets at ${adult_price} each and {children} child tickets "
        f"at ${child_price} each. What was the total revenue in dollars?"
    )
    return question, f"{adults} * {adult_price} + {children} * {child_price}"


def _savings(rng: random.Random) -> tuple[str, str]:
    weekly, weeks, spent = rng.randint(35, 480), rng.randint(12, 104), rng.randint(100, 3000)
    question = (
        f"Sam saves ${weekly} every week for {weeks} weeks, then spends ${spent} on a bicycle. "
        f"How many dollars does Sam have left?"
    )
    return question, f"{weekly} * {weeks} - {spent}"


def _sharing(rng: random.Random) -> tuple[str, str]:
    groups, each, extra = rng.randint(13, 97), rng.randint(110, 990), rng.randint(1, 12)
    total = groups * each + extra
    question = (
        f"{total} marbles are shared equally among {groups} children; the marbles that are left over "
        f"are kept in a jar. How many marbles does each child get?"
    )
    return question, f"{total} // {groups}"


def _expression(rng: random.Random) -> tuple[str, str]:
    a, b, c, d, e = (rng.randint(11, 999) for _ in range(5))
    question = f"Compute ({a} + {b}) * {c} - {d} * {e}."
    return question, f"({a} + {b}) * {c} - {d} * {e}"


def _power_mod(rng: random.Random) -> tuple[str, str]:
    base, exponent, modulus = rng.randint(3, 29), rng.randint(5, 20), rng.randint(97, 9973)
    question = f"What is the remainder when {base} to the power {exponent} is divided by {modulus}?"
    return question, f"{base} ** {exponent} % {modulus}"


TEMPLATES: dict[str, Template] = {
    "warehouse": _warehouse,
    "tickets": _tickets,
    "savings": _savings,
    "sharing": _sharing,
    "expression": _expression,
    "power_mod": _power_mod,
}


def make_examples(n: int, rng: random.Random, exclude: set[str] | None = None,
                  kinds: list[str] | None = None) -> list[dict[str, Any]]:
    """``n`` distinct problems cycling through the templates (``kinds``, default all), none of them in
    ``exclude`` (which is updated)."""
    seen = exclude if exclude is not None else set()
    names = sorted(kinds or TEMPLATES)
    rows: list[dict[str, Any]] = []
    while len(rows) < n:
        kind = names[len(rows) % len(names)] if rng.random() < 0.5 else rng.choice(names)
        question, expression = TEMPLATES[kind](rng)
        if question in seen:
            continue
        seen.add(question)
        answer = safe_eval(expression)
        rows.append(
            {"question": question, "answer": str(answer), "info": {"kind": kind, "solution": expression}}
        )
    return rows
