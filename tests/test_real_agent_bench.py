"""benchmarks/real_agent.py's tool figures: what counts as a call, a parsed call and a turn.

The training and evaluation themselves take up to an hour on a real model (run by hand; the
figures are in docs/agents.md); what is checked here is that the figures it prints mean what
they say, on rollouts built by hand.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import verifiers as vf


@pytest.fixture(scope="module")
def bench(benchmark_script: Callable[[str], Any]) -> Any:
    return benchmark_script("real_agent")


def rollout(turns: int, *assistant: dict[str, Any]) -> vf.RolloutResult:
    return vf.RolloutResult(example_id=0, prompt=[{"role": "user", "content": "q"}], completion=list(assistant),
                            turns=turns)


def call(expression: str) -> dict[str, Any]:
    return {"id": "c", "type": "function",
            "function": {"name": "calculate", "arguments": f'{{"expression": "{expression}"}}'}}


def test_calls_parsed_calls_and_turns_are_counted_per_rollout(bench: Any) -> None:
    results = [
        rollout(2, {"role": "assistant", "content": "", "tool_calls": [call("1 + 1")]},
                {"role": "tool", "content": "2"}, {"role": "assistant", "content": "\\boxed{2}"}),
        # a call that did not parse stays in the text: an attempt, not a call
        rollout(1, {"role": "assistant", "content": '<tool_call>\n{"name": "calculate", "arguments": {'}),
        rollout(1, {"role": "assistant", "content": "\\boxed{5}"}),
        rollout(3, {"role": "assistant", "content": "", "tool_calls": [call("2 * 3"), call("4")]},
                {"role": "tool", "content": "6"}, {"role": "tool", "content": "4"},
                {"role": "assistant", "content": "<tool_call>oops</tool_call>"}),
    ]
    figures = bench.tool_figures(results)
    assert figures["tool_call_rate"] == 0.5  # two of four rollouts made a call that parsed
    assert figures["valid_call_rate"] == 0.6  # 3 parsed of 5 attempts
    assert figures["calls_mean"] == 0.75 and figures["turns_mean"] == 1.75


def test_no_attempt_is_a_zero_rate_not_a_division_error(bench: Any) -> None:
    assert bench.tool_figures([rollout(1, {"role": "assistant", "content": "42"})])["valid_call_rate"] == 0.0
    assert bench.tool_figures([])["tool_call_rate"] == 0.0


def test_the_recipes_named_are_the_shipped_ones(bench: Any) -> None:
    env_path, env_cfg = bench.recipe(False)
    program_path, program_cfg = bench.recipe(True)
    assert env_path.name == "calculator_smollm2.toml" and program_path.name == "calculator_program_smollm2.toml"
    assert bench.task_args(env_cfg["env_args"]) == bench.task_args(program_cfg["env_args"])
    assert "program" not in bench.task_args(program_cfg["env_args"])
