"""Rubric: argument injection, weights, sync/async functions, error recording."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

import verifiers as vf
from verifiers.testing import ScriptedServer

ROWS = [
    {"question": "alpha", "answer": "alpha", "task": "t1", "info": {"level": 1}},
    {"question": "beta", "answer": "other", "task": "t2", "info": {"level": 2}},
]


async def test_arguments_injected_by_name(server: ScriptedServer, client) -> None:
    seen: list[dict[str, Any]] = []

    class Tokenizer:
        def count(self, text: str) -> int:
            return len(text.split())

    tok = Tokenizer()

    def inspect_all(prompt, completion, answer, state, task, info, parser, tokenizer) -> float:
        seen.append(
            dict(
                prompt=prompt,
                completion=completion,
                answer=answer,
                state=state,
                task=task,
                info=info,
                parser=parser,
                tokenizer=tokenizer,
            )
        )
        return 1.0

    def only_answer(answer) -> float:  # asks for just one thing
        return float(len(answer))

    parser = vf.Parser()
    rubric = vf.Rubric(funcs=[inspect_all, only_answer], weights=[1.0, 0.0], parser=parser, tokenizer=tok)
    env = vf.SingleTurnEnv(dataset=ROWS, rubric=rubric, system_prompt="S")
    out = await env.a_evaluate(client, "m")
    assert [r.scoring_errors for r in out.results] == [[], []]
    assert len(seen) == 2
    by_answer = {s["answer"]: s for s in seen}
    first = by_answer["alpha"]
    assert first["prompt"] == [{"role": "system", "content": "S"}, {"role": "user", "content": "alpha"}]
    assert first["completion"] == [{"role": "assistant", "content": "alpha"}]
    assert first["task"] == "t1"
    assert first["info"] == {"level": 1}
    assert first["parser"] is parser
    assert first["tokenizer"] is tok
    assert first["state"] is out.results[0].state
    assert first["state"]["turn"] == 1
    assert out.metrics["only_answer"] == [5.0, 5.0]
    assert out.reward == [1.0, 1.0]


async def test_var_kwargs_receive_everything() -> None:
    got: dict[str, Any] = {}

    def everything(**kwargs) -> float:
        got.update(kwargs)
        return 0.5

    rubric = vf.Rubric(funcs=[everything], judge_like_object="J")
    score = await rubric.score_rollout(
        prompt=[{"role": "user", "content": "p"}],
        completion=[{"role": "assistant", "content": "c"}],
        answer="a",
        state={"k": 1},
        task="t",
        info={"i": 2},
        example_id=7,
    )
    assert score.reward == 0.5
    assert {"prompt", "completion", "answer", "state", "task", "info", "parser", "example_id"} <= set(got)
    assert got["judge_like_object"] == "J"
    assert got["example_id"] == 7
    assert got["state"] == {"k": 1}


async def test_sync_and_async_functions_and_weights() -> None:
    def sync_one(completion) -> float:
        return 1.0

    async def async_half(completion) -> float:
        await asyncio.sleep(0)
        return 0.5

    def metric_only(completion) -> int:  # ints are fine
        return 3

    rubric = vf.Rubric(funcs=[sync_one, async_half, metric_only], weights=[2.0, -4.0, 0.0])
    score = await rubric.score_rollout(prompt=[], completion=[])
    assert score.metrics == {"sync_one": 1.0, "async_half": 0.5, "metric_only": 3.0}
    assert score.reward == pytest.approx(2.0 * 1.0 - 4.0 * 0.5)
    assert score.errors == []
    assert rubric.get_reward_func_names() == ["sync_one", "async_half", "metric_only"]
    assert rubric.get_reward_weights() == [2.0, -4.0, 0.0]
    assert rubric.get_reward_funcs() == [sync_one, async_half, metric_only]


async def test_async_reward_functions_run_concurrently_and_plain_ones_in_order() -> None:
    """Two slow async judges overlap (one wait, not two); plain functions run inline, in order."""
    running, peak, order = [0], [0], []

    async def judge(completion) -> float:
        running[0] += 1
        peak[0] = max(peak[0], running[0])
        await asyncio.sleep(0.01)
        running[0] -= 1
        return 1.0

    class JudgeTwo:  # a callable object with an async __call__ counts as async too
        __name__ = "judge_two"

        async def __call__(self, completion) -> float:
            return await judge(completion)

    judge_two = JudgeTwo()

    def first(completion) -> float:
        order.append("first")
        return 1.0

    def second(completion) -> float:
        order.append("second")
        return 1.0

    score = await vf.Rubric(funcs=[judge, judge_two]).score_rollout(prompt=[], completion=[])
    assert score.reward == 2.0 and peak[0] == 2
    score = await vf.Rubric(funcs=[first, second, judge]).score_rollout(prompt=[], completion=[])
    assert score.reward == 3.0 and order == ["first", "second"]


async def test_exception_in_one_function_is_recorded_and_others_count(server: ScriptedServer, client) -> None:
    def good(completion) -> float:
        return 1.0

    def bad(completion) -> float:
        raise ZeroDivisionError("oops")

    async def also_good(answer) -> float:
        return 2.0

    rubric = vf.Rubric(funcs=[good, bad, also_good], weights=[1.0, 10.0, 1.0])
    env = vf.SingleTurnEnv(dataset=ROWS, rubric=rubric)
    out = await env.a_evaluate(client, "m")
    for r in out.results:
        assert r.error is None  # scoring errors never become rollout errors
        assert r.reward == 3.0
        assert r.metrics == {"good": 1.0, "bad": 0.0, "also_good": 2.0}
        assert len(r.scoring_errors) == 1
        err = r.scoring_errors[0]
        assert err.type == "ZeroDivisionError"
        assert err.where == "reward:bad"
        assert "oops" in err.message


@pytest.mark.parametrize(
    "value",
    ["not a number", None, float("nan"), float("inf"), [1.0]],
    ids=["str", "none", "nan", "inf", "list"],
)
async def test_non_numeric_or_non_finite_return_is_an_error(value) -> None:
    def weird(completion):
        return value

    def fine(completion) -> float:
        return 1.0

    score = await vf.Rubric(funcs=[weird, fine]).score_rollout(prompt=[], completion=[])
    assert score.reward == 1.0
    assert score.metrics["weird"] == 0.0
    assert math.isfinite(score.reward)
    assert [e.where for e in score.errors] == ["reward:weird"]
    assert score.errors[0].type == "RubricError"


async def test_bool_is_accepted_and_a_numeric_string_is_refused() -> None:
    """A string is a parsing result, not a score: "0.25" would train silently on whatever it holds."""

    def as_str(completion):
        return "0.25"

    def as_bool(completion):
        return True

    score = await vf.Rubric(funcs=[as_str, as_bool]).score_rollout(prompt=[], completion=[])
    assert score.metrics == {"as_str": 0.0, "as_bool": 1.0}
    assert [e.where for e in score.errors] == ["reward:as_str"]
    assert "the string '0.25', not a number" in score.errors[0].message


@pytest.mark.parametrize("weights", [[2.0, 1.0], [1.0, 1.0]], ids=["weight-overflow", "sum-overflow"])
async def test_a_reward_that_overflows_after_weighting_is_an_error(weights) -> None:
    def huge(completion) -> float:
        return 1e308

    def also_huge(completion) -> float:
        return 1e308

    score = await vf.Rubric(funcs=[huge, also_huge], weights=weights).score_rollout(prompt=[], completion=[])
    assert math.isfinite(score.reward)
    assert score.errors and score.errors[0].type == "RubricError"
    assert "not a finite number" in score.errors[0].message


async def test_a_group_reward_that_overflows_after_weighting_is_an_error() -> None:
    def huge_group(completions) -> list[float]:
        return [1e308] * len(completions)

    rubric = vf.Rubric(funcs=[huge_group], weights=[10.0])
    scores = [vf.RolloutScore() for _ in range(2)]
    await rubric.score_group([{"completion": []}, {"completion": []}], scores)
    assert all(s.reward == 0.0 and s.metrics["huge_group"] == 0.0 for s in scores)
    assert all(s.errors[0].where == "reward:huge_group" for s in scores)


async def test_missing_required_argument_is_recorded() -> None:
    def needs_tokenizer(completion, tokenizer) -> float:
        return 1.0

    score = await vf.Rubric(funcs=[needs_tokenizer]).score_rollout(prompt=[], completion=[])
    assert score.metrics == {"needs_tokenizer": 0.0}
    assert score.errors[0].type == "RubricError"
    assert "tokenizer" in score.errors[0].message


async def test_optional_argument_with_default_is_not_required() -> None:
    def with_default(completion, tokenizer=None) -> float:
        return 1.0 if tokenizer is None else 2.0

    score = await vf.Rubric(funcs=[with_default]).score_rollout(prompt=[], completion=[])
    assert score.reward == 1.0
    score = await vf.Rubric(funcs=[with_default], tokenizer="T").score_rollout(prompt=[], completion=[])
    assert score.reward == 2.0


async def test_duplicate_names_accepted_as_in_0_1() -> None:
    def f(completion) -> float:
        return 1.0

    rubric = vf.Rubric(funcs=[f, f])
    rubric.add_reward_func(f, 0.5)
    score = await rubric.score_rollout(prompt=[], completion=[])
    assert score.reward == 2.5  # every copy counts in the reward
    assert score.metrics == {"f": 1.0}


async def test_mismatched_weights_pair_by_position() -> None:
    def f(completion) -> float:
        return 1.0

    def g(completion) -> float:
        return 2.0

    short = vf.Rubric(funcs=[f, g], weights=[3.0])  # g has no weight: a metric only
    score = await short.score_rollout(prompt=[], completion=[])
    assert score.reward == 3.0 and score.metrics == {"f": 1.0, "g": 2.0}
    long = vf.Rubric(funcs=[f], weights=[1.0, 2.0])  # the extra weight is unused
    assert (await long.score_rollout(prompt=[], completion=[])).reward == 1.0


def test_non_callable_reward_func_is_config_error() -> None:
    with pytest.raises(vf.ConfigError, match="not callable"):
        vf.Rubric(funcs=["not a function"])  # type: ignore[list-item]


async def test_add_reward_func_and_class_object() -> None:
    rubric = vf.Rubric()

    def uses_obj(completion, scale) -> float:
        return 2.0 * scale

    rubric.add_class_object("scale", 3)
    rubric.add_reward_func(uses_obj, weight=0.5)
    score = await rubric.score_rollout(prompt=[], completion=[])
    assert score.metrics == {"uses_obj": 6.0}
    assert score.reward == 3.0


async def test_bound_method_reward_func() -> None:
    class Grader:
        def __init__(self) -> None:
            self.bonus = 0.5

        def grade(self, answer) -> float:
            return self.bonus + len(answer)

    rubric = vf.Rubric(funcs=[Grader().grade])
    score = await rubric.score_rollout(prompt=[], completion=[], answer="ab")
    assert score.metrics == {"grade": 2.5}


async def test_score_rollouts_legacy_entry_point() -> None:
    def correct(completion, answer) -> float:
        return float(completion[-1]["content"] == answer)

    rubric = vf.Rubric(funcs=[correct])
    completions = [[{"role": "assistant", "content": "a"}], [{"role": "assistant", "content": "b"}]]
    scores = await rubric.score_rollouts(
        prompts=[[], []], completions=completions, answers=["a", "a"], states=[{}, {}]
    )
    assert scores.reward == [1.0, 0.0]
    assert scores.metrics == {"correct": [1.0, 0.0]}
