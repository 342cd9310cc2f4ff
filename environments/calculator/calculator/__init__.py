"""calculator: multi-step word problems solved with a safe ``calculate`` tool.

A ToolEnv: the model may call ``calculate(expression)`` as often as it likes within
``max_turns`` and then answers in ``\\boxed{}``. MathRubric scores the answer;
ToolRubric reports how often the tool was used (weight 0: a metric, not a reward).
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

import verifiers as vf
from calculator.problems import TEMPLATES, make_examples
from calculator.safe_eval import format_number, safe_eval
from verifiers.rubrics import math_equal

__all__ = [
    "NO_TOOL_PROMPT",
    "PROGRAM",
    "SYSTEM_PROMPT",
    "TEMPLATES",
    "calculate",
    "expert_episode",
    "expert_episodes",
    "load_environment",
    "make_examples",
    "printed_answer",
    "safe_eval",
]

SYSTEM_PROMPT = (
    "Solve the problem. You have a calculator tool, `calculate`, for arithmetic; use it instead of "
    "working out large products in your head. When you are done, give the final answer as a "
    "number inside \\boxed{}, e.g. \\boxed{1234}."
)
NO_TOOL_PROMPT = (
    "Solve the problem. Give the final answer as a number inside \\boxed{}, e.g. \\boxed{1234}."
)


def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression and return the result.

    Supports numbers, + - * / // (floor division) % (remainder) ** or ^ (power, exponent at most 100),
    unary minus and parentheses.

    Args:
        expression: The arithmetic to evaluate, e.g. "(12 + 30) * 7 // 4".
    """
    return format_number(safe_eval(expression))


def expert_episode(row: dict[str, Any], tools: list[dict[str, Any]], call_id: str = "call_0") -> dict[str, Any]:
    """A correct episode for one of the environment's rows, as a chat row for vf-train's ``expert_data``:
    one ``calculate`` call with the problem's reference expression, the tool's result, the boxed answer.

    The result is the tool's own output (so the episode is exactly what a rollout would see), and it
    must equal the row's answer: a reference expression that disagrees is a bug, not a demonstration.
    """
    solution = row["info"]["solution"]
    result = calculate(solution)
    if result != row["answer"]:
        raise ValueError(f"reference {solution!r} gives {result}, not the answer {row['answer']}")
    call = {"id": call_id, "type": "function",
            "function": {"name": "calculate", "arguments": json.dumps({"expression": solution})}}
    messages = [*row["prompt"], {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": call_id, "content": result},
                {"role": "assistant", "content": f"\\boxed{{{result}}}"}]
    return {"messages": messages, "tools": tools}


def expert_episodes(env: vf.Environment, n: int) -> list[dict[str, Any]]:
    """Correct episodes for the first ``n`` rows of ``env``'s training split (a user's handful of
    demonstrations; never the evaluation split)."""
    rows = env.get_dataset().rows[:n]
    if len(rows) < n:
        raise ValueError(f"the training split has {len(rows)} rows, fewer than the {n} episodes asked for")
    return [expert_episode(r, env.oai_tools or [], f"call_{i}") for i, r in enumerate(rows)]


PROGRAM = Path(__file__).with_name("calculator_agent.py")
"""The agent program a rollout runs with ``program=True``."""


def printed_answer(state: dict[str, Any], answer: str) -> float:
    """1.0 when the answer the program printed (its ``\\boxed{}``, else the whole output) is ``answer``."""
    printed = str((state.get("agent") or {}).get("stdout") or "")
    boxed = vf.extract_boxed_answer(printed)
    return float(math_equal(boxed if boxed is not None else printed.strip(), answer))


def _program_env(train: list[dict[str, Any]], evaluation: list[dict[str, Any]], max_turns: int,
                 kwargs: dict[str, Any]) -> vf.Environment:
    """The problems played by ``calculator_agent.py`` under `vf.AgentEnv`; ``max_turns`` bounds its model calls."""
    return vf.AgentEnv(
        command=[sys.executable, str(PROGRAM)],
        dataset=train or None, eval_dataset=evaluation or None,
        rubric=vf.Rubric(funcs=[printed_answer], weights=[1.0]),
        env={"AGENT_MAX_CALLS": str(max_turns)},  # the program's own bound; the gateway enforces it too
        max_calls=max_turns,
        **kwargs,
    )


def load_environment(
    num_train_examples: int = 1000,
    num_eval_examples: int = 100,
    seed: int = 0,
    max_turns: int = 5,
    system_prompt: str | None = None,
    tools: bool = True,
    kinds: list[str] | None = None,
    program: bool = False,
    **kwargs: Any,
) -> vf.Environment:
    """Build the calculator environment.

    Args:
        num_train_examples: Size of the training split (0: evaluation only).
        num_eval_examples: Size of the evaluation split, disjoint from training (0: none).
        seed: Seed of the problem generator.
        max_turns: Most model turns per rollout (tool calls plus the final answer).
        system_prompt: Instructions shown before each problem (default: `SYSTEM_PROMPT`, or
            `NO_TOOL_PROMPT` without tools).
        tools: False: the same problems and scoring with no tool offered (a single-turn
            environment), to measure what the model does without the calculator.
        kinds: Only these templates (names of `TEMPLATES`; default all).
        program: True: each rollout runs the agent program ``calculator_agent.py`` (an OpenAI SDK
            tool loop with the same system prompt and tool) under `vf.AgentEnv`, the model reached
            only through the program's calls; the reward reads the answer the program printed.
        **kwargs: Passed on to ``vf.ToolEnv`` (e.g. ``tool_timeout_s``).
    """
    if num_train_examples < 0 or num_eval_examples < 0:
        raise ValueError("num_train_examples and num_eval_examples must be >= 0")
    if num_train_examples == 0 and num_eval_examples == 0:
        raise ValueError("ask for at least one training or evaluation example")
    if max_turns < 1:
        raise ValueError(f"max_turns must be at least 1, got {max_turns}")
    if program and not tools:
        raise ValueError("program=True runs an agent program that offers the calculator; it cannot run with tools=False")
    unknown = sorted(set(kinds or ()) - set(TEMPLATES))
    if unknown or (kinds is not None and not kinds):
        raise ValueError(f"unknown problem kinds {unknown or kinds}; choose from {', '.join(sorted(TEMPLATES))}")
    rng = random.Random(seed)
    seen: set[str] = set()
    train = make_examples(num_train_examples, rng, seen, kinds)
    evaluation = make_examples(num_eval_examples, rng, seen, kinds)

    math_rubric = vf.MathRubric()
    if program:
        return _program_env(train, evaluation, max_turns, kwargs)
    if not tools:
        return vf.SingleTurnEnv(
            dataset=train or None, eval_dataset=evaluation or None,
            system_prompt=system_prompt if system_prompt is not None else NO_TOOL_PROMPT,
            parser=math_rubric.parser, rubric=math_rubric, **kwargs,
        )
    rubric = vf.RubricGroup([math_rubric, vf.ToolRubric(tools=[calculate])])
    return vf.ToolEnv(
        tools=[calculate],
        max_turns=max_turns,
        dataset=train or None,
        eval_dataset=evaluation or None,
        system_prompt=system_prompt if system_prompt is not None else SYSTEM_PROMPT,
        parser=math_rubric.parser,
        rubric=rubric,
        **kwargs,
    )
