"""arithmetic: single-turn integer arithmetic, scored by MathRubric.

The simplest math environment: a generated expression such as ``37 * 4 - 12``, an
integer answer, and MathRubric's equivalence check on the ``\\boxed{}`` (or plain)
answer. Useful as a smoke test of a model, a sampler or a training loop.
"""

from __future__ import annotations

import random
from typing import Any

import verifiers as vf
from arithmetic.problems import ALLOWED_OPERATIONS, evaluate, make_examples, make_problem

__all__ = ["SYSTEM_PROMPT", "evaluate", "load_environment", "make_examples", "make_problem"]

SYSTEM_PROMPT = (
    "Solve the arithmetic problem. Multiplication and division come before addition and "
    "subtraction. Give the final answer as an integer inside \\boxed{}, e.g. \\boxed{42}."
)


def load_environment(
    num_train_examples: int = 1000,
    num_eval_examples: int = 100,
    seed: int = 0,
    min_operand: int = 0,
    max_operand: int = 100,
    num_terms: int = 2,
    operations: str = "+-*",
    allow_division: bool = False,
    system_prompt: str = SYSTEM_PROMPT,
    **kwargs: Any,
) -> vf.Environment:
    """Build the arithmetic environment.

    Args:
        num_train_examples: Size of the training split (0: evaluation only).
        num_eval_examples: Size of the evaluation split (0: none). Expressions do not repeat
            across splits unless the operand range is too small to avoid it.
        seed: Seed of the problem generator.
        min_operand: Smallest operand (may be negative).
        max_operand: Largest operand.
        num_terms: Operands per expression (2 gives ``a op b``).
        operations: Operators to draw from, any of ``+-*/``.
        allow_division: Add exact integer division (``/``) to ``operations``.
        system_prompt: Instructions shown before each problem.
        **kwargs: Passed on to ``vf.SingleTurnEnv``.
    """
    ops = "".join(dict.fromkeys(operations + ("/" if allow_division else "")))
    if not ops or set(ops) - ALLOWED_OPERATIONS:
        raise ValueError(
            f"operations must be a non-empty string of {''.join(sorted(ALLOWED_OPERATIONS))}, got {ops!r}"
        )
    if min_operand > max_operand:
        raise ValueError(f"min_operand ({min_operand}) is larger than max_operand ({max_operand})")
    if num_terms < 2:
        raise ValueError(f"num_terms must be at least 2, got {num_terms}")
    if num_train_examples < 0 or num_eval_examples < 0:
        raise ValueError("num_train_examples and num_eval_examples must be >= 0")
    if num_train_examples == 0 and num_eval_examples == 0:
        raise ValueError("ask for at least one training or evaluation example")
    rng = random.Random(seed)
    seen: set[str] = set()
    train = make_examples(num_train_examples, rng, ops, num_terms, min_operand, max_operand, seen)
    evaluation = make_examples(num_eval_examples, rng, ops, num_terms, min_operand, max_operand, seen)

    rubric = vf.MathRubric()
    return vf.SingleTurnEnv(
        dataset=train or None,
        eval_dataset=evaluation or None,
        system_prompt=system_prompt,
        parser=rubric.parser,
        rubric=rubric,
        **kwargs,
    )
