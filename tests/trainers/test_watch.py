"""A misconfigured run must not look like a real one: broken rewards, dead signal, silent logs."""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from trainers.grpo.data.scoring import RewardFunctionError
from trainers.grpo.run.reporting import curve_panels
from trainers.grpo.run.watch import RunWatch
from verifiers.errors import RubricError


def trainer_with_log(cfg: Any) -> tuple[Any, io.StringIO]:
    from trainers.grpo.trainer import GRPOTrainer

    out = io.StringIO()
    return GRPOTrainer(cfg, console=Console(file=out, width=120)), out


def test_a_reward_function_that_always_raises_stops_the_run_with_its_message(
    tmp_path: Path, train_config: Callable[..., Any]
) -> None:
    trainer, log = trainer_with_log(train_config(tmp_path / "run", env_args={"broken": "raises"}))
    with pytest.raises(RewardFunctionError) as info:
        trainer.train()
    text = str(info.value)
    assert "reward:exact failed on 8/8 rollouts of step 1 (KeyError: 'content')" in text and "reward_error_stop_share" in text and "--resume" in text
    assert "reward:exact raised KeyError on 8/8 rollouts" in log.getvalue()
    assert (tmp_path / "run" / "checkpoints").is_dir()


def test_a_misspelled_argument_is_named(tmp_path: Path, train_config: Callable[..., Any]) -> None:
    trainer, _ = trainer_with_log(train_config(tmp_path / "run", env_args={"broken": "misspelled"}))
    with pytest.raises(RubricError, match=r"exact_typo.*needs \['answr'\]"):
        trainer.train()


def test_with_stopping_off_scoring_errors_are_logged_every_step(
    tmp_path: Path, train_config: Callable[..., Any], run_training: Callable[..., Any]
) -> None:
    run = run_training(train_config(tmp_path / "run", env_args={"broken": "raises"}, reward_error_stop_share=None))
    assert [r["rollouts/scoring_errors"] for r in run.rows] == [8.0, 8.0, 8.0]


def test_output_that_is_not_a_terminal_gets_a_banner_and_plain_lines(
    tmp_path: Path, train_config: Callable[..., Any]
) -> None:
    cfg = train_config(tmp_path / "run", progress=True, log_lines_every=2)
    trainer, log = trainer_with_log(cfg)  # a StringIO console is not a terminal
    trainer.train()
    lines = log.getvalue().splitlines()
    banner = next(line for line in lines if line.startswith("vf-train: "))
    for fact in ("device cpu", "dtype float32", "parameters ", "training prompts", "algorithm grpo", str(tmp_path)):
        assert fact in banner
    steps = [line for line in lines if line.startswith("step ") and "| reward " in line]
    assert [s.split()[1] for s in steps] == ["1/3", "2/3", "3/3"]
    assert all("eta " in s and "loss " in s for s in steps)
    # the loss is printed so that a near-zero GRPO loss still shows its sign and magnitude
    assert all(re.search(r"loss [+-]\d\.\d\de[+-]\d\d ", s) for s in steps), steps


def test_a_degenerate_signal_is_warned_about_once_with_its_fix() -> None:
    printed: list[str] = []
    watch = RunWatch(printed.append, plain=False, max_steps=100, start_step=0, every_steps=10, every_s=30,
                     degenerate_steps=3, masks_truncated=True, filters_groups=True)
    masked = {"reward": 0.03, "completions/clipped_ratio": 1.0, "grad_norm": 0.0}
    for step in range(1, 6):
        watch.step(step, masked)
    assert len(printed) == 1 and "the last 3 steps (to step 3)" in printed[0] and "raise max_tokens" in printed[0]
    watch.step(6, {"reward": 0.5, "grad_norm": 0.3, "frac_reward_zero_std": 1.0})
    watch.step(7, {"reward": 0.5, "grad_norm": 0.3, "frac_reward_zero_std": 1.0})
    assert len(printed) == 1  # a new cause starts its own count
    watch.step(8, {"reward": 0.5, "grad_norm": 0.3, "frac_reward_zero_std": 1.0})
    assert len(printed) == 2 and "every group was filtered" in printed[1]


def test_the_curves_have_no_empty_panel() -> None:
    rows = [{"step": 1, "reward": 0.1, "loss": 0.0, "grad_norm": 0.5, "completions/mean_length": 4.0},
            {"step": 2, "reward": 0.2, "loss": 0.1, "grad_norm": 0.4, "completions/mean_length": 3.0,
             "eval/reward": 0.3}]
    # without a reference model the second panel is the gradient norm, never the ~0 loss
    assert [k for k, _ in curve_panels(rows)] == ["reward", "grad_norm", "completions/mean_length"]
    rows[1]["kl"] = 0.01
    assert [k for k, _ in curve_panels(rows)] == ["reward", "kl", "completions/mean_length"]


def test_a_collapse_is_warned_about_once_with_what_to_change() -> None:
    printed: list[str] = []
    watch = RunWatch(printed.append, plain=False, max_steps=100, start_step=0, every_steps=10, every_s=30,
                     degenerate_steps=10**9, masks_truncated=False, filters_groups=False, collapse_steps=4)
    rows = []
    spreads = [1.0, 1.0, 1.0, 0.5] + [1.0] * 6  # a group with a signal resets the count
    for step, frac in enumerate(spreads, 1):
        rows.append({"reward": 0.9, "grad_norm": 0.1, "frac_reward_zero_std": frac, "entropy": 0.02})
        watch.step(step, rows[-1])
    assert [r["watch/zero_spread_steps"] for r in rows] == [1, 2, 3, 0, 1, 2, 3, 4, 5, 6]
    assert [i + 1 for i, r in enumerate(rows) if "watch/collapse_warning" in r] == [8]
    assert len(printed) == 1
    assert "equal for 4 steps in a row (to step 8) (token entropy 0.02)" in printed[0]
    for fix in ("learning_rate", "temperature", "num_generations"):
        assert fix in printed[0]


def test_a_run_without_any_signal_warns_in_the_log_and_the_metrics(
    tmp_path: Path, train_config: Callable[..., Any]
) -> None:
    cfg = train_config(tmp_path / "run", env_args={"broken": "constant"}, collapse_warn_steps=2,
                       degenerate_warn_steps=0)
    trainer, log = trainer_with_log(cfg)
    trainer.train()
    from trainers.grpo.run.reporting import read_metrics

    rows = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if "reward" in r]
    assert [r["watch/zero_spread_steps"] for r in rows] == [1.0, 2.0, 3.0]
    assert [r.get("watch/collapse_warning") for r in rows] == [None, 1.0, None]
    assert log.getvalue().count("every group's rewards have been equal for 2 steps") == 1


def test_a_step_with_timed_out_rollouts_says_so_in_its_line() -> None:
    from trainers.grpo.run.watch import RunWatch

    lines: list[str] = []
    watch = RunWatch(lines.append, plain=True, max_steps=2, start_step=0, every_steps=1, every_s=30.0,
                     degenerate_steps=5, masks_truncated=False, filters_groups=False)
    watch.step(1, {"reward": 0.5, "loss": 0.1, "rollouts/timeouts": 3.0})
    watch.step(2, {"reward": 0.5, "loss": 0.1, "rollouts/timeouts": 0.0})
    assert "timeouts 3" in lines[0] and "timeouts" not in lines[1]


def test_a_long_step_off_a_terminal_says_which_phase_it_is_in() -> None:
    """Issue 48 item 7: a real model's step can run for minutes; a log must show it is alive."""
    import time

    lines: list[str] = []
    watch = RunWatch(lines.append, plain=True, max_steps=40, start_step=0, every_steps=10, every_s=0.2,
                     degenerate_steps=10, masks_truncated=False, filters_groups=False)
    with watch.heartbeat():
        watch.enter("learning", 1)
        time.sleep(0.9)
        watch.step(1, {"reward": 0.5, "loss": 0.0})  # the step's own line
    beats = [ln for ln in lines if ln.startswith("step 1/40: learning (")]
    assert 2 <= len(beats) <= 6 and lines[-1].startswith("step 1/40 | reward 0.5000")
    time.sleep(0.5)
    assert lines[-1].startswith("step 1/40 | reward")  # the heartbeat ends with the loop
    quiet: list[str] = []
    on_terminal = RunWatch(quiet.append, plain=False, max_steps=40, start_step=0, every_steps=10, every_s=0.2,
                           degenerate_steps=10, masks_truncated=False, filters_groups=False)
    with on_terminal.heartbeat():  # the progress bar shows a terminal user the run is alive
        on_terminal.enter("learning", 3)
        time.sleep(0.5)
    assert quiet == []
