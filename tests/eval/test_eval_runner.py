"""run_eval in-process against real HTTP servers on 127.0.0.1: saving, errors, resume, flags."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import verifiers as vf
from verifiers.eval.runner import EvalConfig, run_eval
from verifiers.testing import ScriptedServer, ServerScript

from .conftest import read_meta, read_rows


def cfg(tmp_path: Path, base_url: str, **kw: Any) -> EvalConfig:
    base: dict[str, Any] = {
        "env_id": "echo",
        "model": "m",
        "base_url": base_url,
        "num_examples": 4,
        "rollouts_per_example": 2,
        "max_retries": 0,
        "save": True,
        "output_dir": tmp_path / "out",
        "show_progress": False,
    }
    base.update(kw)
    return EvalConfig(**base)


def keys(rows: list[dict[str, Any]]) -> list[tuple[int, int]]:
    return sorted((r["example_id"], r["rollout_index"]) for r in rows)


def test_saved_run_has_every_rollout_once_and_matching_metadata(
    tmp_path: Path, echo_env, monkeypatch
) -> None:
    monkeypatch.setenv("VF_TEST_SECRET_KEY", "sk-very-secret-value")
    with ScriptedServer() as srv:
        base_url = srv.base_url
        out = run_eval(
            cfg(
                tmp_path,
                base_url,
                api_key_var="VF_TEST_SECRET_KEY",
                headers={"Authorization-Extra": "tok-xyz"},
            ),
            env=echo_env(4),
        )
    assert out.status == "complete" and out.ran == 8 and out.run_dir is not None
    rows = read_rows(out.run_dir)
    assert keys(rows) == [(e, i) for e in range(4) for i in range(2)]
    assert all(set(r) >= {"prompt", "completion", "reward", "metrics", "stop_reason", "usage"} for r in rows)
    meta = read_meta(out.run_dir)
    assert meta["status"] == "complete"
    assert meta["counts"] == {"expected": 8, "saved": 8, "errored": 0}
    assert meta["avg_reward"] == pytest.approx(sum(r["reward"] for r in rows) / 8) == pytest.approx(0.5)
    assert meta["avg_metrics"] == {"exact": pytest.approx(0.5)}
    assert meta["api_key_var"] == "VF_TEST_SECRET_KEY" and meta["headers"] == {
        "Authorization-Extra": "<redacted>"
    }
    assert meta["example_ids"] == [0, 1, 2, 3] and meta["base_url"] == base_url
    assert meta["versions"]["verifiers"] and meta["versions"]["python"] and meta["duration_s"] >= 0
    for f in out.run_dir.iterdir():
        text = f.read_text()
        assert "sk-very-secret-value" not in text and "tok-xyz" not in text


def test_not_saving_writes_nothing(tmp_path: Path, echo_env) -> None:
    with ScriptedServer() as srv:
        out = run_eval(cfg(tmp_path, srv.base_url, save=False), env=echo_env(3))
    assert out.run_dir is None and len(out.results) == 6 and not (tmp_path / "out").exists()
    assert [(r.example_id, r.rollout_index) for r in out.results] == [
        (e, i) for e in range(3) for i in range(2)
    ]


def test_failed_requests_are_recorded_by_type_not_a_failed_run(tmp_path: Path, echo_env) -> None:
    script = ServerScript(error_rate=1.0, error_statuses=[500, 429])
    with ScriptedServer(script) as srv:
        out = run_eval(cfg(tmp_path, srv.base_url), env=echo_env(4))
    assert out.status == "complete"
    rows = read_rows(out.run_dir)
    assert len(rows) == 8 and {r["error"]["type"] for r in rows} == {"ServerError", "RateLimitError"}
    meta = read_meta(out.run_dir)
    assert meta["counts"]["errored"] == 8 and sum(meta["errors_by_type"].values()) == 8


def test_max_retries_retries_failed_requests(tmp_path: Path, echo_env) -> None:
    with ScriptedServer(ServerScript(fail_first=3)) as srv:
        out = run_eval(cfg(tmp_path, srv.base_url, max_retries=3, max_concurrent=1), env=echo_env(2))
        assert srv.n_requests == 4 + 3
    assert all(r.error is None for r in out.results)


def test_timeout_turns_a_hang_into_a_timeout_error(tmp_path: Path, echo_env) -> None:
    with ScriptedServer(ServerScript(hang_rate=1.0, hang_s=30)) as srv:
        out = run_eval(cfg(tmp_path, srv.base_url, rollout_timeout_s=0.3, num_examples=2), env=echo_env(2))
    assert {r.stop_reason for r in out.results} == {"timeout"}
    assert read_meta(out.run_dir)["errors_by_type"] == {"RolloutTimeoutError": 4}
    assert read_meta(out.run_dir)["rollout_timeout_s"] == 0.3


def test_resume_runs_exactly_the_errored_rollouts(tmp_path: Path, echo_env) -> None:
    with ScriptedServer(ServerScript(fail_first=3)) as srv:
        first = run_eval(cfg(tmp_path, srv.base_url, max_concurrent=1), env=echo_env(4))
        assert read_meta(first.run_dir)["counts"]["errored"] == 3
        srv.reset()
        again = run_eval(cfg(tmp_path, srv.base_url, resume=True), env=echo_env(4))
        assert srv.n_requests == 3  # only the errored ones
    assert again.resumed and again.run_dir == first.run_dir and again.ran == 3
    rows = read_rows(first.run_dir)
    assert keys(rows) == [(e, i) for e in range(4) for i in range(2)] and all(
        r["error"] is None for r in rows
    )
    meta = read_meta(first.run_dir)
    assert meta["resumes"] == 1 and meta["counts"] == {"expected": 8, "saved": 8, "errored": 0}


def test_resume_of_a_finished_run_starts_a_new_one(tmp_path: Path, echo_env) -> None:
    with ScriptedServer() as srv:
        first = run_eval(cfg(tmp_path, srv.base_url), env=echo_env(2))
        second = run_eval(cfg(tmp_path, srv.base_url, resume=True), env=echo_env(2))
        different = run_eval(
            cfg(tmp_path, srv.base_url, resume=True, sampling_args={"temperature": 0.1}), env=echo_env(2)
        )
    assert not second.resumed and second.run_dir != first.run_dir and second.ran == 4
    assert not different.resumed and different.run_dir not in (first.run_dir, second.run_dir)


def test_resume_with_group_rewards_reruns_whole_groups(tmp_path: Path, echo_env) -> None:
    with ScriptedServer(ServerScript(fail_first=1)) as srv:
        run_eval(
            cfg(tmp_path, srv.base_url, max_concurrent=1, rollouts_per_example=3),
            env=echo_env(3, group_func=True),
        )
        srv.reset()
        again = run_eval(
            cfg(tmp_path, srv.base_url, rollouts_per_example=3, resume=True), env=echo_env(3, group_func=True)
        )
        assert srv.n_requests == 3  # the whole group of the errored rollout
    rows = read_rows(again.run_dir)
    assert keys(rows) == [(e, i) for e in range(3) for i in range(3)]
    assert all(r["metrics"]["group_size"] == 3.0 for r in rows)


def test_sampling_args_reach_the_server(tmp_path: Path, echo_env) -> None:
    with ScriptedServer() as srv:
        run_eval(
            cfg(tmp_path, srv.base_url, sampling_args={"max_tokens": 7, "temperature": 0.2, "top_p": 0.9}),
            env=echo_env(1),
        )
        bodies = srv.requests
    assert all(b["max_tokens"] == 7 and b["temperature"] == 0.2 and b["top_p"] == 0.9 for b in bodies)


def test_key_and_headers_are_sent(tmp_path: Path, echo_env, recording_server, monkeypatch) -> None:
    monkeypatch.setenv("VF_TEST_KEY", "sk-abc")
    run_eval(
        cfg(tmp_path, recording_server.base_url, api_key_var="VF_TEST_KEY", headers={"X-Team": "blue"}),
        env=echo_env(1),
    )
    assert recording_server.headers
    for h in recording_server.headers:
        assert h["Authorization"] == "Bearer sk-abc" and h["X-Team"] == "blue"


def test_a_key_echoed_in_an_error_is_not_saved(
    tmp_path: Path, echo_env, recording_server, monkeypatch
) -> None:
    monkeypatch.setenv("VF_TEST_KEY", "sk-echoed-secret")
    recording_server.echo_auth_error = True
    out = run_eval(cfg(tmp_path, recording_server.base_url, api_key_var="VF_TEST_KEY"), env=echo_env(1))
    assert out.results[0].error is not None and out.results[0].error.type == "BadRequestError"
    assert "<redacted>" in out.results[0].error.message
    assert "sk-echoed-secret" not in (out.run_dir / "results.jsonl").read_text()


class CountingEnv(vf.SingleTurnEnv):
    """Records the largest number of rollouts in flight at once."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(eval_dataset=[{"question": f"q{i}", "answer": ""} for i in range(6)], **kw)
        self.now = self.peak = 0

    async def rollout(self, *args: Any, **kwargs: Any) -> Any:
        self.now += 1
        self.peak = max(self.peak, self.now)
        try:
            await asyncio.sleep(0.02)
            return await super().rollout(*args, **kwargs)
        finally:
            self.now -= 1


@pytest.mark.parametrize("limit", [1, 3])
def test_max_concurrent_bounds_rollouts_in_flight(tmp_path: Path, limit: int) -> None:
    env = CountingEnv()
    with ScriptedServer() as srv:
        run_eval(cfg(tmp_path, srv.base_url, save=False, num_examples=-1, max_concurrent=limit), env=env)
    assert env.peak == limit


def test_progress_counts_every_rollout(tmp_path: Path, echo_env) -> None:
    from io import StringIO

    from rich.console import Console

    from verifiers.eval.display import EvalDisplay

    seen: list[EvalDisplay] = []
    original = EvalDisplay.__init__

    def spy(self: EvalDisplay, *a: Any, **k: Any) -> None:
        original(self, *a, **k)
        seen.append(self)

    console = Console(file=StringIO(), force_terminal=True)
    with ScriptedServer(ServerScript(error_rate=0.5, seed=3)) as srv, pytest.MonkeyPatch.context() as mp:
        mp.setattr(EvalDisplay, "__init__", spy)
        out = run_eval(
            cfg(tmp_path, srv.base_url, save=False, show_progress=True), env=echo_env(4), console=console
        )
    progress = seen[0].progress
    assert progress.done == 8 and progress.errors == sum(r.error is not None for r in out.results)
    assert progress.reward_mean == pytest.approx(sum(r.reward for r in out.results) / 8)
    assert "rollouts/s" in console.file.getvalue()  # the live bar was drawn on a terminal


async def test_on_rollout_fires_per_rollout_before_its_group(
    echo_env, server: ScriptedServer, client
) -> None:
    events: list[tuple[str, int]] = []

    async def on_rollout(r: vf.RolloutResult) -> None:  # async callbacks are awaited
        assert r.metrics  # already scored by the per-rollout functions
        events.append(("rollout", r.example_id))

    env = echo_env(3)
    out = await env.a_generate(
        env.eval_dataset,
        client,
        "m",
        rollouts_per_example=2,
        on_rollout=on_rollout,
        on_group=lambda g: events.append(("group", g[0].example_id)),
    )
    assert len(out) == 6 and sum(e[0] == "rollout" for e in events) == 6
    for eid in range(3):
        group_at = events.index(("group", eid))
        assert events[:group_at].count(("rollout", eid)) == 2  # both members reported before their group
