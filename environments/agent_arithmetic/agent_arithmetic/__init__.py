"""agent-arithmetic: integer arithmetic through an agent program that answers, then checks.

Each rollout runs ``check_agent.py`` (the official ``openai`` client, nothing from verifiers) as
a subprocess under `vf.AgentEnv`: the program asks the model to solve ``a op b``, sends the
reply back asking for a check and the final answer alone, and prints that. Both calls go through
the interception gateway, which records their token ids (the second continues the first's exact
ids when the environment has the policy's tokenizer); the reward is whether the printed answer
(its last ``\\boxed{}`` integer, else its last integer) is the problem's.

It needs no tool support from the chat template, so a real small instruct model (SmolLM2, whose
template drops ``tools``) runs it: docs/agents.md has its figures through vf-eval.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import verifiers as vf
from agent_arithmetic.rewards import boxed_answer, correct_answer, model_calls, printed_answer

__all__ = ["PROGRAM", "boxed_answer", "correct_answer", "load_environment", "make_rows", "model_calls", "printed_answer"]

PROGRAM = Path(__file__).with_name("check_agent.py")
"""The agent program each rollout runs."""

_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


def make_rows(n: int, max_operand: int, rng: random.Random, seen: set[str]) -> list[dict[str, Any]]:
    """``n`` distinct problems ``a op b`` (operands 0..max_operand), none of them in ``seen``."""
    rows: list[dict[str, Any]] = []
    space = 3 * (max_operand + 1) ** 2
    while len(rows) < n and len(seen) < space:
        a, b, op = rng.randint(0, max_operand), rng.randint(0, max_operand), rng.choice("+-*")
        expr = f"{a} {op} {b}"
        if expr in seen:
            continue
        seen.add(expr)
        rows.append({"question": f"What is {expr}?", "answer": str(_OPS[op](a, b))})
    return rows


def load_environment(
    max_operand: int = 20,
    num_train_examples: int = 1000,
    num_eval_examples: int = 100,
    seed: int = 0,
    check: bool = True,
    timeout_s: float = 120.0,
    program: str | None = None,
    **kwargs: Any,
) -> vf.Environment:
    """Build the environment.

    Args:
        max_operand: Largest operand (operands are 0..max_operand; operators + - *).
        num_train_examples: Size of the training split.
        num_eval_examples: Size of the evaluation split (0: none); no problem is in both.
        seed: Seed of the problem generator.
        check: Whether the program makes its second, checking call (False: one call).
        timeout_s: Wall-clock bound of one run of the program.
        program: Path of another agent program to run instead of the shipped ``check_agent.py``.
        **kwargs: Passed on to ``vf.AgentEnv`` (e.g. ``tokenizer="smollm2-135m-instruct"`` for
            token-in follow-ups, ``isolation``, ``sampling_args``).
    """
    if max_operand < 1:
        raise ValueError(f"max_operand must be at least 1, got {max_operand}")
    if num_train_examples < 1 or num_eval_examples < 0:
        raise ValueError("need num_train_examples >= 1 and num_eval_examples >= 0")
    path = Path(program) if program is not None else PROGRAM
    if not path.is_file():
        raise ValueError(f"program {str(path)!r} does not exist: pass program= the path of an agent program")
    rng = random.Random(seed)
    seen: set[str] = set()
    train = make_rows(num_train_examples, max_operand, rng, seen)
    evaluation = make_rows(num_eval_examples, max_operand, rng, seen)
    rubric = vf.Rubric(funcs=[correct_answer, boxed_answer, model_calls], weights=[1.0, 0.0, 0.0])
    return vf.AgentEnv(
        command=[sys.executable, str(path)],
        dataset=train,
        eval_dataset=evaluation or None,
        rubric=rubric,
        env={"AGENT_CHECK": "1" if check else "0"},
        max_calls=2 if check else 1,
        timeout_s=timeout_s,
        **kwargs,
    )
