"""Failure paths of the rollout engine over real HTTP: errors are data, siblings unaffected."""

from __future__ import annotations

import math
import time

import pytest

import verifiers as vf
from verifiers.testing import ScriptedReply, ScriptedServer, ServerScript

ROWS = [{"question": f"q{i}", "answer": f"q{i}"} for i in range(6)]


def correct(completion, answer) -> float:
    return float(bool(completion) and completion[-1]["content"] == answer)


def assert_well_formed(r: vf.RolloutResult) -> None:
    assert math.isfinite(r.reward)
    assert isinstance(r.completion, list)
    assert "correct" in r.metrics
    r.model_dump_json()


async def test_server_500_on_every_request(server: ScriptedServer, make_client) -> None:
    server.set_script(ServerScript(error_rate=1.0, error_statuses=[500]))
    client = make_client(server.base_url, max_retries=0)
    env = vf.SingleTurnEnv(dataset=ROWS, rubric=vf.Rubric(funcs=[correct]))
    out = await env.a_evaluate(client, "m")
    assert len(out.results) == 6
    for r in out.results:
        assert r.stop_reason == "error"
        assert r.error is not None
        assert r.error.type == "ServerError"
        assert r.error.where == "model"
        assert r.completion == []
        assert r.reward == 0.0
        assert_well_formed(r)
    assert server.n_requests == 6  # max_retries=0: one request each


async def test_random_failures_leave_siblings_unaffected(server: ScriptedServer, make_client) -> None:
    server.set_script(ServerScript(error_rate=0.5, error_statuses=[500], seed=1234))
    client = make_client(server.base_url, max_retries=0)
    rows = [{"question": f"q{i}", "answer": f"q{i}"} for i in range(20)]
    env = vf.SingleTurnEnv(dataset=rows, rubric=vf.Rubric(funcs=[correct]))
    out = await env.a_evaluate(client, "m", rollouts_per_example=2)
    failed = [r for r in out.results if r.error is not None]
    ok = [r for r in out.results if r.error is None]
    assert failed and ok, "expected failures and successes to coexist"
    assert len(failed) + len(ok) == 40
    for r in failed:
        assert r.error.type == "ServerError"
        assert r.stop_reason == "error"
        assert r.reward == 0.0
        assert_well_formed(r)
    for r in ok:
        assert r.stop_reason == "completed"
        assert r.reward == 1.0
        assert r.completion == [{"role": "assistant", "content": r.prompt[-1]["content"]}]
        assert_well_formed(r)
    assert out.example_id == [i % 20 for i in range(40)]
    assert server.n_errors == len(failed)


async def test_fail_first_with_retries_succeeds(server: ScriptedServer, make_client) -> None:
    server.set_script(ServerScript(fail_first=2, fail_first_status=500))
    client = make_client(server.base_url, max_retries=3)
    env = vf.SingleTurnEnv(dataset=ROWS[:1], rubric=vf.Rubric(funcs=[correct]))
    out = await env.a_evaluate(client, "m")
    r = out.results[0]
    assert r.error is None
    assert r.reward == 1.0
    assert server.n_requests == 3  # two failures, then success


async def test_fail_first_without_enough_retries_fails(server: ScriptedServer, make_client) -> None:
    server.set_script(ServerScript(fail_first=3, fail_first_status=503))
    client = make_client(server.base_url, max_retries=1)
    env = vf.SingleTurnEnv(dataset=ROWS[:1])
    out = await env.a_evaluate(client, "m")
    assert out.results[0].error.type == "ServerError"
    assert server.n_requests == 2


async def test_429_becomes_rate_limit_error_after_retries(server: ScriptedServer, make_client) -> None:
    server.set_script(ServerScript(error_rate=1.0, error_statuses=[429]))
    client = make_client(server.base_url, max_retries=2)
    env = vf.SingleTurnEnv(dataset=ROWS[:2])
    out = await env.a_evaluate(client, "m")
    for r in out.results:
        assert r.error is not None and r.error.type == "RateLimitError"
        assert r.stop_reason == "error"
    assert server.n_requests == 2 * 3


async def test_400_bad_request_is_not_retried(server: ScriptedServer, make_client) -> None:
    server.set_script(ServerScript(error_rate=1.0, error_statuses=[400]))
    client = make_client(server.base_url, max_retries=3)
    env = vf.SingleTurnEnv(dataset=ROWS[:1])
    out = await env.a_evaluate(client, "m")
    assert out.results[0].error.type == "BadRequestError"
    assert server.n_requests == 1


@pytest.mark.timeout(20)
async def test_hang_past_rollout_timeout(server: ScriptedServer, client) -> None:
    server.set_script(ServerScript(hang_rate=1.0, hang_s=30))
    cleaned = []

    class Env(vf.SingleTurnEnv):
        async def cleanup_state(self, state):
            cleaned.append(state["example_id"])

    env = Env(dataset=ROWS[:3], rubric=vf.Rubric(funcs=[correct]))
    t0 = time.perf_counter()
    out = await env.a_evaluate(client, "m", rollout_timeout_s=0.5)
    elapsed = time.perf_counter() - t0
    assert elapsed < 3
    for r in out.results:
        assert r.stop_reason == "timeout"
        assert r.error is not None and r.error.type == "RolloutTimeoutError"
        assert r.is_truncated is True
        assert_well_formed(r)
    assert sorted(cleaned) == [0, 1, 2]


@pytest.mark.timeout(20)
async def test_env_level_rollout_timeout(server: ScriptedServer, client) -> None:
    server.set_script(ServerScript(hang_rate=1.0, hang_s=30))
    env = vf.SingleTurnEnv(dataset=ROWS[:2], rollout_timeout_s=0.3)
    t0 = time.perf_counter()
    out = await env.a_evaluate(client, "m")
    assert time.perf_counter() - t0 < 3
    assert out.stop_reason == ["timeout", "timeout"]


@pytest.mark.timeout(20)
async def test_timeout_only_hits_the_slow_rollouts(server: ScriptedServer, client) -> None:
    server.set_script(
        ServerScript(
            replies=[
                ScriptedReply(match="^q1$", content="slow", latency_s=10),
                ScriptedReply(content="{last_user}"),
            ]
        )
    )
    env = vf.SingleTurnEnv(dataset=ROWS[:3], rubric=vf.Rubric(funcs=[correct]))
    out = await env.a_evaluate(client, "m", rollout_timeout_s=0.5)
    assert out.stop_reason == ["completed", "timeout", "completed"]
    assert out.reward == [1.0, 0.0, 1.0]


async def test_overlong_prompt_is_truncation_not_error(server: ScriptedServer, client) -> None:
    server.set_script(ServerScript(context_length=40))
    rows = [{"question": "short", "answer": "short"}, {"question": "x" * 100, "answer": "y"}]
    env = vf.SingleTurnEnv(dataset=rows, rubric=vf.Rubric(funcs=[correct]))
    out = await env.a_evaluate(client, "m")
    short, long = out.results
    assert short.stop_reason == "completed" and short.reward == 1.0
    assert long.stop_reason == "prompt_too_long"
    assert long.is_truncated is True
    assert long.error is None
    assert long.completion == []
    assert_well_formed(long)


async def test_overlong_prompt_in_later_turn(server: ScriptedServer, client) -> None:
    class Grow(vf.MultiTurnEnv):
        async def env_response(self, messages, state, **kwargs):
            return [{"role": "user", "content": "y" * 30}]

    server.set_script(ServerScript(context_length=80, replies=[ScriptedReply(content="ok")]))
    env = Grow(dataset=[{"question": "q"}], max_turns=10)
    out = await env.a_evaluate(client, "m")
    r = out.results[0]
    assert r.stop_reason == "prompt_too_long"
    assert r.is_truncated and r.error is None
    assert r.turns >= 1
    assert r.completion[0] == {"role": "assistant", "content": "ok"}


async def test_max_tokens_truncation_is_length(server: ScriptedServer, client) -> None:
    server.set_script(ServerScript(replies=[ScriptedReply(content="a long long answer")]))

    class Env(vf.MultiTurnEnv):
        async def env_response(self, messages, state, **kwargs):
            return [{"role": "user", "content": "more"}]

    env = Env(dataset=[{"question": "q"}], max_turns=5)
    out = await env.a_evaluate(client, "m", sampling_args={"max_tokens": 4})
    r = out.results[0]
    assert r.stop_reason == "length"
    assert r.is_truncated is True
    assert r.error is None
    assert r.turns == 1  # a truncated turn ends the episode
    assert r.completion == [{"role": "assistant", "content": "a lo"}]
    assert server.requests[-1]["max_tokens"] == 4


async def test_exception_in_env_response_only_fails_that_rollout(server: ScriptedServer, client) -> None:
    class Picky(vf.MultiTurnEnv):
        async def env_response(self, messages, state, **kwargs):
            if messages[-1]["content"] == "q3":
                raise KeyError("picky about q3")
            return [{"role": "user", "content": "fine"}]

    env = Picky(dataset=ROWS, rubric=vf.Rubric(funcs=[correct]), max_turns=2)
    out = await env.a_evaluate(client, "m")
    for i, r in enumerate(out.results):
        if i == 3:
            assert r.stop_reason == "error"
            assert r.error.type == "KeyError"
            assert r.error.where == "env"
            assert "picky about q3" in r.error.message
            assert r.completion == [{"role": "assistant", "content": "q3"}]
        else:
            assert r.error is None
            assert r.stop_reason == "max_turns"
        assert_well_formed(r)


async def test_exception_in_setup_state(server: ScriptedServer, client) -> None:
    class Broken(vf.SingleTurnEnv):
        async def setup_state(self, state, **kwargs):
            raise RuntimeError("no sandbox")

    env = Broken(dataset=ROWS[:2], rubric=vf.Rubric(funcs=[correct]))
    out = await env.a_evaluate(client, "m")
    assert [r.error.type for r in out.results] == ["RuntimeError", "RuntimeError"]
    assert [r.error.where for r in out.results] == ["env", "env"]
    assert server.n_requests == 0


async def test_empty_choices_is_model_error(server: ScriptedServer, client) -> None:
    """A 200 with an unusable body is a model error recorded on the rollout."""

    class NoChoices(vf.SingleTurnEnv):
        async def get_model_response(self, *args, **kwargs):
            from verifiers.clients.response import parse_chat_response

            return parse_chat_response({"choices": []})

    env = NoChoices(dataset=ROWS[:1])
    out = await env.a_evaluate(client, "m")
    assert out.results[0].error.type == "EmptyResponseError"
    assert out.results[0].error.where == "model"
