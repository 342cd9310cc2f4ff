"""A small, safe arithmetic evaluator for the ``calculate`` tool.

The model's text is parsed with `ast` and only number literals, ``+ - * / // % **``,
unary ``+``/``-`` and parentheses are evaluated; names, calls, attributes, strings and
everything else are refused. ``eval`` is never used: a model could otherwise read
files or hang the process. Sizes are bounded too, because ``9**9**9`` is "just
arithmetic" yet would take the process hours and gigabytes.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable

__all__ = ["MAX_ABS_EXPONENT", "MAX_DIGITS", "MAX_EXPRESSION_CHARS", "format_number", "safe_eval"]

Number = int | float

MAX_EXPRESSION_CHARS = 500
MAX_ABS_EXPONENT = 100
MAX_DIGITS = 1000
"""Largest integer result, in decimal digits, of any intermediate step."""

_BINARY: dict[type[ast.operator], Callable[[Number, Number], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_SYMBOLS = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
}
_INT_LIMIT = 10**MAX_DIGITS


def safe_eval(expression: str) -> Number:
    """Value of an arithmetic expression such as ``(12 + 3) * 4 ** 2 // 7``.

    ``^`` is read as power, as models (and people) often write it.

    Raises ValueError, with a message meant for the model, for anything that is not
    plain arithmetic, for division by zero, and for results that are too large.
    """
    if not isinstance(expression, str):
        raise ValueError(f"expression must be a string, got {type(expression).__name__}")
    text = expression.strip()
    if not text:
        raise ValueError("expression is empty; pass arithmetic such as '(2 + 3) * 4'")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ValueError(f"expression is {len(text)} characters long; the limit is {MAX_EXPRESSION_CHARS}")
    try:
        tree = ast.parse(text.replace("^", "**") if "^" in text else text, mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"could not parse {text!r}: {exc.msg}") from None
    try:
        return _eval(tree.body)
    except RecursionError:
        raise ValueError("the expression is nested too deeply") from None


def _eval(node: ast.AST) -> Number:
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"only numbers are allowed, got {value!r}")
        return _check(value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.UAdd | ast.USub):
        operand = _eval(node.operand)
        return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.BinOp):
        op_type = type(node.op)
        if op_type not in _SYMBOLS:
            raise ValueError(f"operator {type(node.op).__name__} is not allowed; use + - * / // % **")
        left, right = _eval(node.left), _eval(node.right)
        try:
            if op_type is ast.Pow:
                return _check(_power(left, right))
            return _check(_BINARY[op_type](left, right))
        except ZeroDivisionError:
            raise ValueError(f"division by zero in '{_SYMBOLS[op_type]}'") from None
        except OverflowError:
            raise ValueError("the result is too large") from None
    raise ValueError(f"{_describe(node)} is not allowed; use numbers, + - * / // % ** and parentheses")


def _power(base: Number, exponent: Number) -> Number:
    if abs(exponent) > MAX_ABS_EXPONENT:
        raise ValueError(
            f"exponent {exponent} is too large; the limit is {MAX_ABS_EXPONENT} in absolute value"
        )
    if base == 0 and exponent < 0:
        raise ZeroDivisionError
    # Refuse before computing: the digits of base**exponent are about exponent*log10|base|.
    exact = isinstance(base, int) and isinstance(exponent, int)
    if exact and exponent > 0 and base not in (0, 1, -1) and exponent * math.log10(abs(base)) > MAX_DIGITS:
        raise ValueError(f"the result has more than {MAX_DIGITS} digits")
    result = base**exponent
    if isinstance(result, complex):
        raise ValueError("a negative number to a fractional power has no real value")
    return result


def _check(value: Number) -> Number:
    if isinstance(value, int) and abs(value) >= _INT_LIMIT:
        raise ValueError(f"the result has more than {MAX_DIGITS} digits")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("the result is too large (not a finite number)")
    return value


def _describe(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return f"the name {node.id!r}"
    if isinstance(node, ast.Call):
        return "a function call"
    return f"the syntax {type(node).__name__!r}"


def format_number(value: Number) -> str:
    """Integers exactly; floats with 12 significant digits, and whole floats without ``.0``."""
    if isinstance(value, int):
        return str(value)
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return format(value, ".12g")
