"""Group reward functions and RubricGroup, through the rollout engine."""

from __future__ import annotations

import pytest

import verifiers as vf
from verifiers.testing import ScriptedReply, ScriptedServer, ServerScript

ROWS = [{"question": "one", "answer": "one"}, {"question": "two", "answer": "two"}]


def varied_script() -> ServerScript:
    # Replies differ per example; the group sees the r completions of ONE example.
    return ServerScript(replies=[ScriptedReply(content="{last_user}-{reversed_last_user}")])


async def test_plural_parameters_make_a_group_function(server: ScriptedServer, client) -> None:
    calls = []

    def relative(completions, answers, example_ids, states) -> list[float]:
        calls.append(
            {"completions": completions, "answers": answers, "example_ids": example_ids, "states": states}
        )
        return [float(i) for i in range(len(completions))]

    def per_rollout(completion) -> float:
        return 10.0

    rubric = vf.Rubric(funcs=[relative, per_rollout])
    assert rubric.has_group_funcs
    server.set_script(varied_script())
    env = vf.SingleTurnEnv(dataset=ROWS, rubric=rubric)
    out = await env.a_evaluate(client, "m", rollouts_per_example=3)
    assert len(calls) == 2  # once per group
    for call in calls:
        assert len(call["completions"]) == 3
        assert len(set(call["example_ids"])) == 1  # one example per group
        assert len(set(call["answers"])) == 1
        eid = call["example_ids"][0]
        expected_text = ROWS[eid]["question"] + "-" + ROWS[eid]["question"][::-1]
        assert [c[-1]["content"] for c in call["completions"]] == [expected_text] * 3
        assert len({id(s) for s in call["states"]}) == 3
    # Group scores land on the right rollouts (by rollout index) and add to the reward.
    assert out.metrics["relative"] == [0.0, 0.0, 1.0, 1.0, 2.0, 2.0]  # dataset repeated: a,b,a,b,a,b
    assert out.metrics["per_rollout"] == [10.0] * 6
    assert out.reward == [10.0, 10.0, 11.0, 11.0, 12.0, 12.0]


async def test_group_reward_decorator(server: ScriptedServer, client) -> None:
    seen = []

    @vf.group_reward
    def diversity(**kwargs) -> list[float]:
        seen.append(len(kwargs["completions"]))
        n = len(kwargs["completions"])
        return [1.0 / n] * n

    env = vf.SingleTurnEnv(dataset=ROWS, rubric=vf.Rubric(funcs=[diversity], weights=[2.0]))
    out = await env.a_evaluate(client, "m", rollouts_per_example=4)
    assert seen == [4, 4]
    assert out.reward == [pytest.approx(0.5)] * 8


async def test_async_group_function(server: ScriptedServer, client) -> None:
    async def rank(completions) -> list[float]:
        return [1.0] * len(completions)

    env = vf.SingleTurnEnv(dataset=ROWS[:1], rubric=vf.Rubric(funcs=[rank]))
    out = await env.a_evaluate(client, "m", rollouts_per_example=2)
    assert out.reward == [1.0, 1.0]


@pytest.mark.parametrize("result", [[1.0], 5.0, ["x", "y"]], ids=["wrong-length", "scalar", "non-numeric"])
async def test_bad_group_function_result_is_recorded_on_every_member(
    server: ScriptedServer, client, result
) -> None:
    def broken(completions):
        return result

    def fine(completion) -> float:
        return 1.0

    env = vf.SingleTurnEnv(dataset=ROWS[:1], rubric=vf.Rubric(funcs=[broken, fine]))
    out = await env.a_evaluate(client, "m", rollouts_per_example=2)
    for r in out.results:
        assert r.error is None
        assert r.reward == 1.0
        assert r.metrics["broken"] == 0.0
        assert [e.where for e in r.scoring_errors] == ["reward:broken"]


async def test_group_function_raising(server: ScriptedServer, client) -> None:
    def boom(completions):
        raise RuntimeError("group boom")

    env = vf.SingleTurnEnv(dataset=ROWS, rubric=vf.Rubric(funcs=[boom]))
    out = await env.a_evaluate(client, "m", rollouts_per_example=2)
    assert out.reward == [0.0] * 4
    assert all(r.scoring_errors[0].type == "RuntimeError" for r in out.results)


async def test_on_group_sees_group_scores(server: ScriptedServer, client) -> None:
    groups = []

    def rank(completions) -> list[float]:
        return [float(i) for i in range(len(completions))]

    env = vf.SingleTurnEnv(dataset=ROWS, rubric=vf.Rubric(funcs=[rank]))
    await env.a_evaluate(
        client, "m", rollouts_per_example=3, on_group=lambda g: groups.append([r.reward for r in g])
    )
    assert groups == [[0.0, 1.0, 2.0], [0.0, 1.0, 2.0]]


# -- RubricGroup ---------------------------------------------------------------------------


async def test_rubric_group_sums_rewards_and_merges_metrics(server: ScriptedServer, client) -> None:
    def correct(completion, answer) -> float:
        return float(completion[-1]["content"] == answer)

    def length(completion) -> float:
        return float(len(completion[-1]["content"]))

    def rank(completions) -> list[float]:
        return [0.1 * i for i in range(len(completions))]

    def crash(completion) -> float:
        raise ValueError("x")

    r1 = vf.Rubric(funcs=[correct], weights=[1.0])
    r2 = vf.Rubric(funcs=[length, rank, crash], weights=[0.5, 1.0, 1.0])
    group = vf.RubricGroup(rubrics=[r1, r2])
    assert group.get_reward_func_names() == ["correct", "length", "rank", "crash"]
    assert group.reward_weights == [1.0, 0.5, 1.0, 1.0]
    assert group.has_group_funcs
    env = vf.SingleTurnEnv(dataset=ROWS, rubric=group)
    out = await env.a_evaluate(client, "m", rollouts_per_example=2)
    assert set(out.metrics) == {"correct", "length", "rank", "crash"}
    assert out.metrics["correct"] == [1.0] * 4
    assert out.metrics["length"] == [3.0, 3.0, 3.0, 3.0]
    assert out.metrics["rank"] == [0.0, 0.0, 0.1, 0.1]
    assert out.reward == [pytest.approx(v) for v in (2.5, 2.5, 2.6, 2.6)]
    assert all([e.where for e in r.scoring_errors] == ["reward:crash"] for r in out.results)


def test_rubric_group_needs_rubrics() -> None:
    with pytest.raises(vf.ConfigError):
        vf.RubricGroup(rubrics=[])
