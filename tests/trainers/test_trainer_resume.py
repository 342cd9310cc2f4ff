"""Resuming: a run stopped and continued from its checkpoint equals one that never stopped.

The engine runs with ``engine_max_batch_size = 1`` here: which requests share a decoding
batch depends on arrival timing, and batch composition changes the sampler's float results
(logprobs by ~5e-7). Rewards and losses only depend on the sampled tokens, but a token whose
sampling threshold sits that close to the edge would flip; one request at a time rules it out.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from trainers.grpo import cli
from trainers.grpo.config import TrainConfig, load_config
from trainers.grpo.run.checkpoint import load_checkpoint

COMPARED = ("reward", "loss", "grad_norm", "entropy", "reward_std", "completions/mean_length")


def assert_same_rows(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> None:
    assert [r["step"] for r in a] == [r["step"] for r in b]
    for ra, rb in zip(a, b, strict=True):
        for key in COMPARED:
            assert rb[key] == pytest.approx(ra[key], abs=1e-6), (ra["step"], key)


def test_stopped_and_resumed_equals_uninterrupted(
    tmp_path: Path, train_config: Callable[..., TrainConfig], run_training: Callable[..., Any]
) -> None:
    settings = {"engine_max_batch_size": 1, "seed": 3}
    a = run_training(train_config(tmp_path / "a", max_steps=4, **settings))

    first = run_training(train_config(tmp_path / "b", max_steps=2, **settings))
    assert [r["step"] for r in first.rows] == [1, 2]
    ckpt = load_checkpoint(tmp_path / "b" / "checkpoints" / "step_0000002")
    assert ckpt["step"] == 2 and ckpt["version"] == 2

    b = run_training(train_config(tmp_path / "b", max_steps=4, **settings), resume=True)
    assert b.summary.steps == 4
    assert_same_rows(a.rows, b.rows)  # metrics.jsonl keeps steps 1-2 and appends 3-4
    assert b.trainer.sync.engine.weight_version == 4
    wa, wb = a.trainer.model.state_dict(), b.trainer.model.state_dict()
    for name in wa:
        torch.testing.assert_close(wb[name], wa[name], rtol=0, atol=1e-6, msg=name)


def test_checkpoint_regenerates_batches_in_flight(
    tmp_path: Path, train_config: Callable[..., TrainConfig], run_training: Callable[..., Any]
) -> None:
    """With generation running ahead, the checkpoint points at the first batch not trained on,
    whether or not that batch had finished generating when the run stopped (slow scoring keeps
    it unfinished here)."""
    slow = {"num_batches_ahead": 1, "env_args": {"score_delay_s": 0.3}}
    cfg = train_config(tmp_path / "run", max_steps=2, **slow)
    run_training(cfg)
    state = load_checkpoint(tmp_path / "run" / "checkpoints" / "step_0000002")["generator"]
    assert state["next_batch_id"] == 2
    # two batches of prompts_per_step prompts, each index repeated num_generations times
    assert state["sampler"]["position"] == 2 * cfg.prompts_per_step * cfg.num_generations

    resumed = run_training(train_config(tmp_path / "run", max_steps=3, **slow), resume=True)
    assert [r["step"] for r in resumed.rows] == [1, 2, 3]


def _toml_value(v: Any) -> str:
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + "}"
    return json.dumps(v)  # strings, numbers, booleans and lists of them read the same in TOML


def to_toml(data: dict[str, Any]) -> str:
    return "".join(f"{k} = {_toml_value(v)}\n" for k, v in data.items() if v is not None)


def _wait_for_first_step(proc: subprocess.Popen[str], metrics: Path, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"vf-train exited with {proc.returncode} before logging a step")
        if metrics.is_file() and metrics.read_text().strip():
            return
        time.sleep(0.01)
    raise AssertionError("vf-train logged no step in time")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_interrupt_checkpoints_and_resume_equals_uninterrupted(
    sig: signal.Signals,
    tmp_path: Path,
    base_model_dir: Path,
    vf_train: list[str],
    subprocess_env: dict[str, str],
    train_config: Callable[..., TrainConfig],
    run_training: Callable[..., Any],
    metrics_rows: Callable[[Path], list[dict[str, Any]]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    max_steps = 16  # with slowed scoring, long enough that the run cannot finish before the signal
    out_dir = tmp_path / "run"
    settings = {"max_steps": max_steps, "engine_max_batch_size": 1, "env_args": {"score_delay_s": 0.05}}
    cfg = train_config(out_dir, **settings)
    toml = tmp_path / "run.toml"
    toml.write_text(to_toml(cfg.model_dump(mode="json")))
    assert load_config(toml) == cfg  # the subprocess trains exactly this config

    log = (tmp_path / "first.out").open("w+")
    proc = subprocess.Popen([*vf_train, str(toml)], stdout=log, stderr=subprocess.STDOUT, text=True,
                            env=subprocess_env)
    try:
        _wait_for_first_step(proc, out_dir / "metrics.jsonl")
        proc.send_signal(sig)
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    log.seek(0)
    output = log.read()
    log.close()
    assert code == 130, output
    summary = json.loads(output.strip().splitlines()[-1])
    stopped_at = summary["steps"]
    assert summary["interrupted"] is True and 1 <= stopped_at < max_steps
    assert (out_dir / "checkpoints" / f"step_{stopped_at:07d}" / "state.pt").is_file()
    assert [r["step"] for r in metrics_rows(out_dir / "metrics.jsonl")] == list(range(1, stopped_at + 1))
    assert not (out_dir / "final_model").exists()

    # `vf-train CONFIG --resume`, in this process (a second interpreter start costs ~10 s)
    capsys.readouterr()
    assert cli.main([str(toml), "--resume"]) == 0
    printed = capsys.readouterr().out
    assert json.loads(printed.strip().splitlines()[-1])["steps"] == max_steps
    assert f"at step {stopped_at}" in printed.replace("\n", " ")  # rich may wrap the line
    resumed_rows = metrics_rows(out_dir / "metrics.jsonl")

    # Ctrl-C finishes the step in progress and SIGTERM abandons it (unless its weights were
    # already being updated); either way the checkpoint is a step boundary, so the continued
    # run equals one never interrupted.
    baseline = run_training(train_config(tmp_path / "baseline", **settings))
    assert_same_rows(baseline.rows, resumed_rows)
