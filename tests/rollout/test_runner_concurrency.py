"""The rollout engine: concurrency bound, ordering, on_group, run_rollouts directly."""

from __future__ import annotations

import asyncio
import time

import pytest

import verifiers as vf
from verifiers.testing import ScriptedServer, ServerScript

ROWS = [{"question": f"q{i}", "answer": f"q{i}"} for i in range(8)]


class CountingEnv(vf.SingleTurnEnv):
    """Counts model requests in flight (client side)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.in_flight = 0
        self.max_in_flight = 0

    async def get_model_response(self, *args, **kwargs):
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return await super().get_model_response(*args, **kwargs)
        finally:
            self.in_flight -= 1


@pytest.mark.timeout(20)
async def test_max_concurrent_bounds_in_flight_requests(server: ScriptedServer, client) -> None:
    server.set_script(ServerScript(latency_s=0.2))
    env = CountingEnv(dataset=ROWS)

    t0 = time.perf_counter()
    out = await env.a_evaluate(client, "m", max_concurrent=2)
    bounded = time.perf_counter() - t0
    assert env.max_in_flight == 2
    assert bounded >= 0.8 - 0.05  # 8 requests, 2 at a time, 0.2 s each
    assert out.error == [None] * 8

    env2 = CountingEnv(dataset=ROWS)
    t0 = time.perf_counter()
    await env2.a_evaluate(client, "m", max_concurrent=8)
    wide = time.perf_counter() - t0
    assert env2.max_in_flight == 8
    assert wide < 0.6

    env3 = CountingEnv(dataset=ROWS)
    await env3.a_evaluate(client, "m")  # default: no limit
    assert env3.max_in_flight == 8


@pytest.mark.timeout(20)
def test_max_concurrent_sync_generate(server: ScriptedServer) -> None:
    server.set_script(ServerScript(latency_s=0.2))
    env = CountingEnv(dataset=ROWS)
    client = vf.make_client(server.base_url, max_retries=0)
    t0 = time.perf_counter()
    env.generate(ROWS, client, "m", max_concurrent=2)
    assert time.perf_counter() - t0 >= 0.75
    assert env.max_in_flight == 2


@pytest.mark.timeout(20)
async def test_env_level_max_concurrent_applies_to_evaluate(server: ScriptedServer, client) -> None:
    server.set_script(ServerScript(latency_s=0.05))
    env = CountingEnv(dataset=ROWS, max_concurrent=2)
    await env.a_evaluate(client, "m")
    assert env.max_in_flight == 2


@pytest.mark.timeout(20)
async def test_env_level_max_concurrent_applies_to_generate(server: ScriptedServer, client) -> None:
    server.set_script(ServerScript(latency_s=0.05))
    env = CountingEnv(dataset=ROWS, max_concurrent=3)
    await env.a_generate(ROWS, client, "m")
    assert env.max_in_flight == 3


async def test_results_in_input_order_despite_completion_order(server: ScriptedServer, client) -> None:
    # Earlier prompts answer more slowly, so they finish last.
    from verifiers.testing import ScriptedReply

    server.set_script(
        ServerScript(
            replies=[
                ScriptedReply(match="^q0$", content="{last_user}", latency_s=0.3),
                ScriptedReply(match="^q1$", content="{last_user}", latency_s=0.2),
                ScriptedReply(match="^q2$", content="{last_user}", latency_s=0.1),
                ScriptedReply(content="{last_user}"),
            ]
        )
    )
    env = vf.SingleTurnEnv(dataset=ROWS)
    finished: list[int] = []
    out = await env.a_evaluate(client, "m", on_group=lambda g: finished.append(g[0].example_id))
    assert [c[-1]["content"] for c in out.completion] == [f"q{i}" for i in range(8)]
    assert out.example_id == list(range(8))
    # on_group fires in completion order: the slow first examples come last.
    assert finished[-3:] == [2, 1, 0]
    assert sorted(finished) == list(range(8))


async def test_on_group_called_once_per_scored_group(server: ScriptedServer, client) -> None:
    groups: list[list[vf.RolloutResult]] = []

    def correct(completion, answer) -> float:
        return float(completion[-1]["content"] == answer)

    async def on_group(group):  # async callbacks are awaited
        await asyncio.sleep(0)
        groups.append(group)

    env = vf.SingleTurnEnv(dataset=ROWS[:3], rubric=vf.Rubric(funcs=[correct]))
    out = await env.a_evaluate(client, "m", rollouts_per_example=4, on_group=on_group)
    assert len(groups) == 3
    for g in groups:
        assert len(g) == 4
        assert len({r.example_id for r in g}) == 1
        assert len({r.group_id for r in g}) == 1
        assert [r.rollout_index for r in g] == [0, 1, 2, 3]
        assert all(r.reward == 1.0 and r.metrics == {"correct": 1.0} for r in g)  # already scored
    assert sorted(r.example_id for g in groups for r in g) == sorted(out.example_id)


async def test_run_rollouts_directly_with_explicit_groups(server: ScriptedServer, client) -> None:
    env = vf.SingleTurnEnv(dataset=ROWS)
    prompt = [{"role": "user", "content": "same"}]
    # The same prompt may appear in two groups of one batch: group ids are explicit.
    inputs = [
        vf.RolloutInput(example_id=0, prompt=prompt, group_id=10, rollout_index=0),
        vf.RolloutInput(example_id=0, prompt=prompt, group_id=11, rollout_index=0),
        vf.RolloutInput(example_id=0, prompt=prompt, group_id=10, rollout_index=1),
    ]
    seen: list[list[int]] = []
    results = await vf.run_rollouts(
        env, client, "m", inputs, on_group=lambda g: seen.append([r.group_id for r in g]), max_concurrent=1
    )
    assert [r.group_id for r in results] == [10, 11, 10]
    assert sorted(seen) == [[10, 10], [11]]
    assert all(r.completion == [{"role": "assistant", "content": "same"}] for r in results)


async def test_timing_and_usage_recorded(server: ScriptedServer, client) -> None:
    server.set_script(ServerScript(latency_s=0.05))
    env = vf.SingleTurnEnv(dataset=ROWS[:2])
    out = await env.a_evaluate(client, "m")
    for r in out.results:
        assert r.timing.generation_s >= 0.04
        assert r.timing.total_s >= r.timing.generation_s
        assert r.timing.start_time > 0
        assert r.usage.prompt_tokens > 0 and r.usage.completion_tokens == 2
