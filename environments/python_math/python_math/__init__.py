"""python-math: computational number theory solved by writing Python in a sandbox.

A ToolEnv with one tool, ``python(code)``, that runs the model's code in a child
process under resource limits (`verifiers.tools.sandbox`) and returns what it printed.
MathRubric scores the final ``\\boxed{}`` answer; ToolRubric reports tool use.
"""

from __future__ import annotations

import random
from typing import Any

import verifiers as vf
from python_math.problems import KINDS, make_examples, solve

__all__ = ["KINDS", "SYSTEM_PROMPT", "load_environment", "make_examples", "solve"]

SYSTEM_PROMPT = (
    "Solve the problem. You can run Python code with the `python` tool; it returns what the "
    "code prints, so print the values you need. Each call starts a fresh interpreter with the "
    "standard library only, under time and memory limits. When you are done, give the final "
    "answer as an integer inside \\boxed{}, e.g. \\boxed{1234}."
)


def load_environment(
    num_train_examples: int = 1000,
    num_eval_examples: int = 100,
    seed: int = 0,
    max_turns: int = 6,
    kinds: list[str] | None = None,
    wall_time_s: float = 10.0,
    cpu_time_s: float | None = None,
    memory_mb: int = 512,
    max_output_chars: int = 4000,
    system_prompt: str = SYSTEM_PROMPT,
    **kwargs: Any,
) -> vf.Environment:
    """Build the python-math environment.

    Args:
        num_train_examples: Size of the training split (0: evaluation only).
        num_eval_examples: Size of the evaluation split, disjoint from training (0: none).
        seed: Seed of the problem generator.
        max_turns: Most model turns per rollout (tool calls plus the final answer).
        kinds: Problem kinds to use (default: all of `KINDS`).
        wall_time_s: Wall-clock limit of one ``python`` call; the process group is killed after it.
        cpu_time_s: CPU-time limit of one call (default: ``wall_time_s``).
        memory_mb: Address-space limit of one call, in MiB.
        max_output_chars: Output kept per stream (stdout / stderr); the middle is cut beyond it.
        system_prompt: Instructions shown before each problem.
        **kwargs: Passed on to ``vf.ToolEnv``. ``tool_timeout_s`` defaults to ``wall_time_s + 5``
            so that the sandbox's own limit, with its clear message, fires first.
    """
    if num_train_examples < 0 or num_eval_examples < 0:
        raise ValueError("num_train_examples and num_eval_examples must be >= 0")
    if num_train_examples == 0 and num_eval_examples == 0:
        raise ValueError("ask for at least one training or evaluation example")
    if max_turns < 1:
        raise ValueError(f"max_turns must be at least 1, got {max_turns}")
    chosen = list(kinds) if kinds is not None else sorted(KINDS)
    unknown = sorted(set(chosen) - set(KINDS))
    if not chosen or unknown:
        raise ValueError(f"unknown problem kinds {unknown or chosen}; choose from {sorted(KINDS)}")
    limits = vf.SandboxLimits(
        wall_time_s=wall_time_s,
        cpu_time_s=cpu_time_s if cpu_time_s is not None else wall_time_s,
        memory_mb=memory_mb,
        max_output_chars=max_output_chars,
    )
    rng = random.Random(seed)
    seen: set[str] = set()
    train = make_examples(num_train_examples, rng, chosen, seen)
    evaluation = make_examples(num_eval_examples, rng, chosen, seen)

    python = vf.python_tool(limits)
    math_rubric = vf.MathRubric()
    rubric = vf.RubricGroup([math_rubric, vf.ToolRubric(tools=[python])])
    kwargs.setdefault("tool_timeout_s", wall_time_s + 5.0)
    return vf.ToolEnv(
        tools=[python],
        max_turns=max_turns,
        dataset=train or None,
        eval_dataset=evaluation or None,
        system_prompt=system_prompt,
        parser=math_rubric.parser,
        rubric=rubric,
        **kwargs,
    )
