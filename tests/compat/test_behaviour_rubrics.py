"""0.1.x rubrics: live ``reward_funcs``/``reward_weights`` lists and the old scoring entry points."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from datasets import Dataset
from openai import AsyncOpenAI

import verifiers as vf
from verifiers.compat.scores import RolloutScore, RolloutScores
from verifiers.testing import ScriptedServer


def exact(completion, answer) -> float:
    return 1.0 if completion[-1]["content"] == answer else 0.0


def length(completion) -> float:
    return float(len(completion[-1]["content"]))


async def bonus(completion, **kwargs) -> float:
    return 0.5 if kwargs["task"] == "default" else 0.0


class LengthRubric(vf.Rubric):
    """A 0.1.x subclass: builds its lists after super().__init__, then edits them."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.reward_funcs = [exact, length]
        self.reward_weights = [1.0, 0.0]
        self.reward_funcs.append(bonus)
        self.reward_weights.append(2.0)
        self.reward_weights[1] = 0.1


@pytest.fixture
def echo() -> Iterator[ScriptedServer]:
    with ScriptedServer() as srv:  # echoes the last user message
        yield srv


def test_lists_edited_after_construction_are_scored(echo: ScriptedServer) -> None:
    rubric = LengthRubric(parser=vf.Parser())
    env = vf.SingleTurnEnv(
        dataset=Dataset.from_list([{"question": "abc", "answer": "abc"}, {"question": "hello", "answer": "x"}]),
        rubric=rubric,
    )
    # ... and even after the environment was built, before scoring.
    def shout(completion) -> float:
        return 1.0 if completion[-1]["content"].isupper() else 0.0

    env.rubric.reward_funcs.append(shout)
    env.rubric.reward_weights.append(-1.0)
    assert env.get_reward_funcs() is rubric.reward_funcs
    out = env.evaluate(AsyncOpenAI(base_url=echo.base_url, api_key="k"), "m")
    assert out.metrics == {
        "exact": [1.0, 0.0],
        "length": [3.0, 5.0],
        "bonus": [0.5, 0.5],
        "shout": [0.0, 0.0],
    }
    assert out.reward == [pytest.approx(1.0 + 0.3 + 1.0), pytest.approx(0.5 + 1.0)]


async def test_duplicates_and_short_weights_as_0_1() -> None:
    rubric = vf.Rubric(funcs=[length, exact, length], weights=[2.0])
    assert rubric.get_reward_func_names() == ["length", "exact", "length"]
    assert rubric.get_reward_weights() == [2.0]
    completion = [{"role": "assistant", "content": "abcd"}]
    score = await rubric.score_rollout([], completion, "abcd", {}, "default", {})
    assert isinstance(score, RolloutScore)
    # Weights pair by position; exact and the second length have none: metrics only.
    assert score.reward == 8.0
    assert score.metrics == {"length": 4.0, "exact": 1.0}
    assert vf.Rubric(funcs=[length, exact]).reward_weights == [1.0, 1.0]  # no weights: all 1


async def test_score_rollouts_and_call_reward_func() -> None:
    rubric = vf.Rubric(funcs=[exact, length], weights=[1.0, 0.5], parallelize_scoring=False)
    assert rubric.parallelize_scoring is False
    completions = [[{"role": "assistant", "content": c}] for c in ("a", "bb", "a")]
    scores = await rubric.score_rollouts(
        [[], [], []], completions, ["a", "a", "b"], [{}, {}, {}], ["default"] * 3, [{}, {}, {}]
    )
    assert isinstance(scores, RolloutScores)
    assert scores.reward == [1.5, 1.0, 0.5]
    assert scores.metrics == {"exact": [1.0, 0.0, 0.0], "length": [1.0, 2.0, 1.0]}
    value = await rubric.call_reward_func(length, [], completions[1], "a", {}, "default", {})
    assert value == 2.0


def test_rubric_kwargs_become_attributes(caplog: pytest.LogCaptureFixture) -> None:
    rubric = vf.Rubric(funcs=[exact], threshold=0.7, reward_funcs_extra=1)
    assert rubric.threshold == 0.7
    with caplog.at_level("WARNING"):
        shadow = vf.Rubric(funcs=[exact], score_rollout="oops")
    assert callable(shadow.score_rollout)  # our method kept
    assert "score_rollout" in caplog.text
