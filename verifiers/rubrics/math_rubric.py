"""MathRubric: symbolic / numeric answer equivalence with math-verify."""

from __future__ import annotations

import functools
import logging
import threading
from typing import Any

from verifiers.parsers.parser import Parser, extract_boxed_answer
from verifiers.rubrics.rubric import RewardFunc, Rubric

_TIMEOUT_S = 5


class _NoTimeoutNotice(logging.Filter):
    """Drops math-verify's "Timeout is disabled ..." warning (printed once per process by its parser
    and once by its grader). Off the main thread no timeout is passed on purpose: math-verify's
    timeouts use SIGALRM, which only the main thread can use. The notice asks the caller to add
    timeout logic of their own, which nobody running vf-eval or vf-train can act on; at the start
    of every run it read like a fault of the run."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Timeout is disabled")


@functools.cache
def _quiet_timeout_notice() -> None:
    for name in ("math_verify.parser", "math_verify.grader"):
        logging.getLogger(name).addFilter(_NoTimeoutNotice())


def _boxed_or_text(text: str) -> str:
    boxed = extract_boxed_answer(text)
    return boxed if boxed is not None else text.strip()


def _limit() -> int | None:
    """math-verify's timeout here: its timeouts use SIGALRM, which only the main thread can use."""
    if threading.current_thread() is threading.main_thread():
        return _TIMEOUT_S
    _quiet_timeout_notice()
    return None


def math_parse(text: str) -> list[Any]:
    """math-verify's ``parse`` of ``text`` from any thread (a trainer scores off the main thread, where
    math-verify's own timeout raises): what an environment reading numbers its own way should call."""
    from math_verify import parse

    return list(parse(text, parsing_timeout=_limit()))


def math_equal(predicted: str, answer: str) -> bool:
    """True when ``predicted`` and ``answer`` are the same number / expression / set.

    Both strings are parsed with math-verify (LaTeX and plain expressions); when
    a side does not parse, falls back to an exact string comparison.
    """
    from math_verify import verify  # imported lazily: sympy is slow to import

    predicted, answer = predicted.strip(), str(answer).strip()
    if not predicted:
        return False
    gold = math_parse(_wrap(answer))
    pred = math_parse(_wrap(predicted))
    if gold and pred:
        return bool(verify(gold, pred, timeout_seconds=_limit()))
    return predicted == answer


def reads_a_number(reply: str) -> bool:
    """True when the grader reads one number from ``reply`` (boxed or plain, prose included).

    What `MathRubric` compares is math-verify's parse of the last ``\\boxed{}`` or of the whole
    reply, and that parse finds the number in "The answer is 5" as well, and "7 + 5 = 12" as an
    equation it scores by its right-hand side. A reply it reads as a number (or such an equation)
    has stated an answer; one it reads as symbols or nothing has not, whatever it says.
    """
    text = _boxed_or_text(reply)
    if not text:
        return False
    values = math_parse(_wrap(text))
    if not values:
        return False
    value = values[0]
    if getattr(value, "is_number", isinstance(value, int | float)) is True:
        return True
    # "7 + 5 = 12" parses to Eq(5 + 7, 12), which the grader scores by its right-hand side
    return getattr(getattr(value, "rhs", None), "is_number", False) is True


def _wrap(s: str) -> str:
    # math-verify finds answers inside $...$ or \boxed{}; bare numbers parse too, expressions need $.
    return s if "$" in s or "\\boxed" in s else f"${s}$"


class MathRubric(Rubric):
    """Scores 1.0 when the parsed answer is mathematically equal to ``answer`` (weight 1 by default)."""

    def __init__(
        self,
        funcs: list[RewardFunc] | None = None,
        weights: list[float] | None = None,
        parser: Parser | None = None,
        **class_objects: Any,
    ) -> None:
        super().__init__(
            funcs=funcs, weights=weights, parser=parser or Parser(extract_fn=_boxed_or_text), **class_objects
        )
        self.add_reward_func(self.correct_answer_reward_func)

    def correct_answer_reward_func(self, parser: Parser, completion: Any, answer: Any, **_: Any) -> float:
        parsed = parser.parse_answer(completion)
        if parsed is None:
            return 0.0
        return 1.0 if math_equal(str(parsed), str(answer)) else 0.0
