"""calculator: multi-step word problems solved with a safe ``calculate`` tool.

A ToolEnv: the model may call ``calculate(expression)`` as often as it likes within
``max_turns`` and then answers in ``\\boxed{}``. MathRubric scores the answer;
ToolRubric reports how often the tool was used (weight 0: a metric, not a reward).
"""

from __future__ import annotations

import random
from typing import Any

import verifiers as vf
from calculator.problems import TEMPLATES, make_examples
from calculator.safe_eval import format_number, safe_eval

__all__ = ["SYSTEM_PROMPT", "TEMPLATES", "calculate", "load_environment", "make_examples", "safe_eval"]

SYSTEM_PROMPT = (
    "Solve the problem. You have a calculator tool, `calculate`, for arithmetic; use it instead of "
    "working out large products in your head. When you are done, give the final answer as a "
    "number inside \\boxed{}, e.g. \\boxed{1234}."
)


def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression and return the result.

    Supports numbers, + - * / // (floor division) % (remainder) ** or ^ (power, exponent at most 100),
    unary minus and parentheses.

    Args:
        expression: The arithmetic to evaluate, e.g. "(12 + 30) * 7 // 4".
    """
    return format_number(safe_eval(expression))


def load_environment(
    num_train_examples: int = 1000,
    num_eval_examples: int = 100,
    seed: int = 0,
    max_turns: int = 5,
    system_prompt: str = SYSTEM_PROMPT,
    **kwargs: Any,
) -> vf.Environment:
    """Build the calculator environment.

    Args:
        num_train_examples: Size of the training split (0: evaluation only).
        num_eval_examples: Size of the evaluation split, disjoint from training (0: none).
        seed: Seed of the problem generator.
        max_turns: Most model turns per rollout (tool calls plus the final answer).
        system_prompt: Instructions shown before each problem.
        **kwargs: Passed on to ``vf.ToolEnv`` (e.g. ``tool_timeout_s``).
    """
    if num_train_examples < 0 or num_eval_examples < 0:
        raise ValueError("num_train_examples and num_eval_examples must be >= 0")
    if num_train_examples == 0 and num_eval_examples == 0:
        raise ValueError("ask for at least one training or evaluation example")
    if max_turns < 1:
        raise ValueError(f"max_turns must be at least 1, got {max_turns}")
    rng = random.Random(seed)
    seen: set[str] = set()
    train = make_examples(num_train_examples, rng, seen)
    evaluation = make_examples(num_eval_examples, rng, seen)

    math_rubric = vf.MathRubric()
    rubric = vf.RubricGroup([math_rubric, vf.ToolRubric(tools=[calculate])])
    return vf.ToolEnv(
        tools=[calculate],
        max_turns=max_turns,
        dataset=train or None,
        eval_dataset=evaluation or None,
        system_prompt=system_prompt,
        parser=math_rubric.parser,
        rubric=rubric,
        **kwargs,
    )
