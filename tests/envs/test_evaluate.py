"""evaluate / generate (sync and async) over real HTTP, and the shape of their outputs."""

from __future__ import annotations

import asyncio

import openai
import pytest

import verifiers as vf
from verifiers.testing import ScriptedServer

LIST_FIELDS = ("prompt", "completion", "answer", "state", "info", "task", "reward")


def make_env(rows, exact_match, **kwargs) -> vf.SingleTurnEnv:
    return vf.SingleTurnEnv(dataset=rows, rubric=vf.Rubric(funcs=[exact_match]), **kwargs)


def check_shape(out: vf.GenerateOutputs, n: int) -> None:
    assert isinstance(out, vf.GenerateOutputs)
    for name in LIST_FIELDS:
        value = getattr(out, name)
        assert isinstance(value, list), name
        assert len(value) == n, name
    assert isinstance(out.metrics, dict)
    for name, values in out.metrics.items():
        assert isinstance(values, list) and len(values) == n, name
    assert len(out) == n
    assert len(out.results) == n


def test_evaluate_sync_outputs(server: ScriptedServer, rows, exact_match) -> None:
    env = make_env(rows, exact_match, system_prompt="Echo.")
    client = vf.make_client(server.base_url, max_retries=0)
    out = env.evaluate(client, "test-model")
    check_shape(out, 3)
    assert out.reward == [1.0, 1.0, 0.0]
    assert out.metrics == {"exact_match": [1.0, 1.0, 0.0]}
    assert out.answer == ["alpha", "beta", "not-gamma"]
    assert out.task == ["default"] * 3
    assert out.info == [{}, {}, {}]
    assert out.prompt[0] == [
        {"role": "system", "content": "Echo."},
        {"role": "user", "content": "alpha"},
    ]
    # The completion is only what the model added, never the prompt.
    assert out.completion[0] == [{"role": "assistant", "content": "alpha"}]
    assert all(isinstance(s, dict) for s in out.state)
    assert out.stop_reason == ["completed"] * 3
    assert out.error == [None] * 3
    assert {b["model"] for b in server.requests} == {"test-model"}


def test_evaluate_twice_with_same_client(server: ScriptedServer, rows, exact_match) -> None:
    """The sync wrapper runs a fresh event loop per call; the client must survive that."""
    env = make_env(rows, exact_match)
    client = vf.make_client(server.base_url, max_retries=0)
    first = env.evaluate(client, "m")
    second = env.evaluate(client, "m")
    third = env.generate(rows, client, "m")
    for out in (first, second, third):
        assert out.error == [None] * 3, out.error
        assert out.reward == [1.0, 1.0, 0.0]
    assert server.n_requests == 9


async def test_sync_evaluate_inside_running_loop(server: ScriptedServer, rows, exact_match) -> None:
    """Notebooks call the sync API from inside a running loop; it must still work."""
    env = make_env(rows, exact_match)
    client = vf.make_client(server.base_url, max_retries=0)
    out = env.evaluate(client, "m")
    assert out.reward == [1.0, 1.0, 0.0]
    # And the same client then works in this loop too.
    out2 = await env.a_evaluate(client, "m")
    assert out2.reward == [1.0, 1.0, 0.0]
    await client.close()


async def test_a_evaluate_and_a_generate(server: ScriptedServer, client, rows, exact_match) -> None:
    env = make_env(rows, exact_match)
    out = await env.a_evaluate(client, "m", num_examples=2)
    check_shape(out, 2)
    assert out.reward == [1.0, 1.0]
    gen = await env.a_generate([{"question": "zeta", "answer": "zeta"}], client, "m")
    check_shape(gen, 1)
    assert gen.completion == [[{"role": "assistant", "content": "zeta"}]]
    assert gen.reward == [1.0]
    # Same client used again in the same loop.
    again = await env.a_generate(rows, client, "m")
    assert again.reward == [1.0, 1.0, 0.0]


def test_generate_accepts_prompt_rows_and_column_dict(server: ScriptedServer, exact_match) -> None:
    env = vf.SingleTurnEnv(dataset=[{"question": "x"}], rubric=vf.Rubric(funcs=[exact_match]))
    client = vf.make_client(server.base_url, max_retries=0)
    out = env.generate(
        {
            "prompt": [[{"role": "user", "content": "p1"}], [{"role": "user", "content": "p2"}]],
            "answer": ["p1", "no"],
        },
        client,
        "m",
    )
    assert out.reward == [1.0, 0.0]
    assert out.example_id == [0, 1]


async def test_rollouts_per_example_makes_groups(server: ScriptedServer, client, rows, exact_match) -> None:
    env = make_env(rows, exact_match)
    out = await env.a_evaluate(client, "m", rollouts_per_example=3)
    check_shape(out, 9)
    # 0.1.x order: the dataset repeated (a,b,c,a,b,c); groups are tied by group_id, not position.
    assert out.example_id == [0, 1, 2] * 3
    assert [r.rollout_index for r in out.results] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    groups = {}
    for r in out.results:
        groups.setdefault(r.group_id, set()).add(r.example_id)
    assert len(groups) == 3
    assert all(len(ids) == 1 for ids in groups.values())
    # Every rollout has its own state object.
    assert len({id(s) for s in out.state}) == 9
    assert server.n_requests == 9


def test_sync_openai_client_works(server: ScriptedServer, rows, exact_match) -> None:
    env = make_env(rows, exact_match)
    sync_client = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
    out = env.evaluate(sync_client, "m")
    assert out.reward == [1.0, 1.0, 0.0]
    assert out.error == [None] * 3
    sync_client.close()


async def test_sync_openai_client_in_async_api(server: ScriptedServer, rows, exact_match) -> None:
    env = make_env(rows, exact_match)
    with openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0) as sync_client:
        out = await env.a_evaluate(sync_client, "m")
    assert out.reward == [1.0, 1.0, 0.0]


def test_bad_client_is_a_config_error(rows, exact_match) -> None:
    env = make_env(rows, exact_match)
    with pytest.raises(vf.ConfigError, match="make_client"):
        env.evaluate("http://localhost:8000/v1", "m")


def test_rollouts_per_example_must_be_positive(server: ScriptedServer, rows, exact_match) -> None:
    env = make_env(rows, exact_match)
    client = vf.make_client(server.base_url, max_retries=0)
    with pytest.raises(vf.ConfigError, match="rollouts_per_example"):
        env.evaluate(client, "m", rollouts_per_example=0)


async def test_sampling_args_sent_and_merged_with_env_defaults(server: ScriptedServer, client, rows) -> None:
    env = vf.SingleTurnEnv(
        dataset=rows,
        sampling_args={"temperature": 0.3, "extra_body": {"top_k": 5}},
    )
    await env.a_evaluate(
        client, "m", num_examples=1, sampling_args={"max_tokens": 50, "extra_body": {"min_p": 0.1}}
    )
    body = server.requests[-1]
    assert body["temperature"] == 0.3
    assert body["max_tokens"] == 50
    assert body["top_k"] == 5 and body["min_p"] == 0.1
    assert "extra_body" not in body


async def test_score_rollouts_false_leaves_rewards_empty(
    server: ScriptedServer, client, rows, exact_match
) -> None:
    """As 0.1.5: no reward column (not a column of zeros that reads like a failing model)."""
    env = make_env(rows, exact_match)
    out = await env.a_evaluate(client, "m", score_rollouts=False)
    assert out.reward == [] and out.metrics == {}
    assert len(out.completion) == 3 and all(c[-1]["role"] == "assistant" for c in out.completion)


async def test_results_are_serialisable(server: ScriptedServer, client, rows, exact_match) -> None:
    env = make_env(rows, exact_match)
    out = await env.a_evaluate(client, "m")
    for r in out.results:
        line = r.model_dump_json()
        back = vf.RolloutResult.model_validate_json(line)
        assert back.reward == r.reward
        assert back.completion == r.completion
        assert "state" not in r.model_dump()


async def test_a_evaluate_concurrent_calls_share_client(
    server: ScriptedServer, client, rows, exact_match
) -> None:
    env = make_env(rows, exact_match)
    outs = await asyncio.gather(*(env.a_evaluate(client, "m") for _ in range(4)))
    assert all(o.reward == [1.0, 1.0, 0.0] for o in outs)


async def test_extra_body_none_is_tolerated(server: ScriptedServer, client, rows) -> None:
    env = vf.SingleTurnEnv(dataset=rows)
    out = await env.a_evaluate(client, "m", sampling_args={"temperature": 0.0, "extra_body": None})
    assert out.error == [None] * 3
    assert server.requests[-1]["temperature"] == 0.0
