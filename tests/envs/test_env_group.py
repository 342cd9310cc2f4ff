"""EnvGroup: concatenated datasets, routing by task, merged metrics."""

from __future__ import annotations

import pytest

import verifiers as vf
from verifiers.testing import ScriptedReply, ScriptedServer, ServerScript


def echo_correct(completion, answer) -> float:
    return float(completion[-1]["content"] == answer)


def length_metric(completion) -> float:
    return float(len(completion))


class Countdown(vf.MultiTurnEnv):
    """Two model turns; the environment says 'next' in between."""

    async def env_response(self, messages, state, **kwargs):
        return [{"role": "user", "content": "next"}]

    async def cleanup_state(self, state):
        state["countdown_cleaned"] = True


def make_group() -> vf.EnvGroup:
    echo = vf.SingleTurnEnv(
        dataset=[{"question": "e1", "answer": "e1"}, {"question": "e2", "answer": "wrong"}],
        system_prompt="ECHO-ENV",
        rubric=vf.Rubric(funcs=[echo_correct]),
    )
    multi = Countdown(
        dataset=[{"question": "m1"}],
        max_turns=2,
        system_prompt="MULTI-ENV",
        rubric=vf.Rubric(funcs=[length_metric], weights=[0.5]),
    )
    return vf.EnvGroup(envs=[echo, multi], env_names=["echo", "multi"])


def test_datasets_concatenated_with_task_names() -> None:
    group = make_group()
    ds = group.dataset
    assert len(ds) == 3
    assert ds["task"] == ["echo", "echo", "multi"]
    assert ds["example_id"] == [0, 1, 2]
    assert ds[0]["prompt"][0]["content"] == "ECHO-ENV"
    assert ds[2]["prompt"][0]["content"] == "MULTI-ENV"
    assert group.rubric.get_reward_func_names() == ["echo_correct", "length_metric"]


def test_env_group_needs_unique_names_and_envs() -> None:
    env = vf.SingleTurnEnv(dataset=[{"question": "q"}])
    with pytest.raises(vf.ConfigError):
        vf.EnvGroup(envs=[])
    with pytest.raises(vf.ConfigError, match="unique"):
        vf.EnvGroup(envs=[env, env], env_names=["a", "a"])
    with pytest.raises(vf.ConfigError):
        vf.EnvGroup(envs=[env, env], env_names=["a"])


async def test_rollouts_routed_by_task(server: ScriptedServer, client) -> None:
    server.set_script(
        ServerScript(
            replies=[
                ScriptedReply(match="next", content="multi-second"),
                ScriptedReply(content="{last_user}"),
            ]
        )
    )
    group = make_group()
    out = await group.a_evaluate(client, "m")
    assert out.task == ["echo", "echo", "multi"]
    assert out.error == [None, None, None]
    e1, e2, m1 = out.results
    # echo env: single turn, its own rubric
    assert e1.completion == [{"role": "assistant", "content": "e1"}]
    assert e1.reward == 1.0 and e2.reward == 0.0
    assert e1.stop_reason == "completed"
    # multi env: two turns and its own rubric (weight 0.5 on the length of the completion)
    assert m1.turns == 2
    assert m1.stop_reason == "max_turns"
    assert m1.completion[2] == {"role": "assistant", "content": "multi-second"}
    assert m1.metrics["length_metric"] == float(len(m1.completion))
    assert m1.reward == 0.5 * len(m1.completion)
    # Metrics of the other environment are filled with 0.
    assert e1.metrics == {"echo_correct": 1.0, "length_metric": 0.0}
    assert m1.metrics["echo_correct"] == 0.0
    assert out.metrics["echo_correct"] == [1.0, 0.0, 0.0]
    assert set(out.metrics) == {"echo_correct", "length_metric"}
    # The sub environment's cleanup ran.
    assert m1.state.get("countdown_cleaned") is True
    # Each request carried its own environment's system prompt.
    systems = sorted(b["messages"][0]["content"] for b in server.requests)
    assert systems == ["ECHO-ENV", "ECHO-ENV", "MULTI-ENV", "MULTI-ENV"]


async def test_env_group_with_group_reward_and_rollouts_per_example(server: ScriptedServer, client) -> None:
    seen = []

    @vf.group_reward
    def rank(completions, **kwargs):
        seen.append(len(completions))
        return [float(i) for i in range(len(completions))]

    a = vf.SingleTurnEnv(dataset=[{"question": "a"}], rubric=vf.Rubric(funcs=[rank]))
    b = vf.SingleTurnEnv(dataset=[{"question": "b"}], rubric=vf.Rubric(funcs=[echo_correct]))
    group = vf.EnvGroup(envs=[a, b], env_names=["ranked", "plain"])
    out = await group.a_evaluate(client, "m", rollouts_per_example=3)
    assert out.task == ["ranked", "plain"] * 3  # 0.1.x order: the dataset repeated
    assert seen == [3]
    assert out.metrics["rank"] == [0.0, 0.0, 1.0, 0.0, 2.0, 0.0]
    assert out.reward[0::2] == [0.0, 1.0, 2.0]


async def test_unknown_task_is_an_error_result_not_a_batch_abort(server: ScriptedServer, client) -> None:
    group = make_group()
    rows = [{"question": "e1", "answer": "e1", "task": "echo"}, {"question": "x", "task": "nope"}]
    try:
        out = await group.a_generate(rows, client, "m")
    except vf.ConfigError:
        # Rejecting the inputs up front (before any request) would be fine too.
        assert server.n_requests == 0
        return
    good, bad = out.results
    assert good.error is None and good.reward == 1.0
    assert bad.stop_reason == "error"
    # UnknownTaskError: an EnvError, and a KeyError as 0.1.x's dict lookup raised
    assert bad.error is not None and bad.error.type == "UnknownTaskError"
    assert "nope" in bad.error.message
