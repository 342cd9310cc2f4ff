"""`benchmarks/trainer_step.py`: how rounds pool into the reported figures, and the size presets.

The trainers themselves run in the benchmark (minutes); here the pooling is checked on step
lists whose medians differ depending on whether each round's warm-up steps are dropped, so a
figure taken from one round only, or with a warm-up step left in, fails.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import pytest


@pytest.fixture(scope="module")
def bench(benchmark_script: Callable[[str], Any]) -> Any:
    return benchmark_script("trainer_step")


def _phase(gen: float, fwd_bwd: float) -> dict[str, float]:
    return {"generation_s": gen, "train_s": fwd_bwd + 0.01, "build_batch_s": 0.005, "logprobs_s": 0.0,
            "fwd_bwd_s": fwd_bwd, "fwd_bwd_cpu_s": fwd_bwd, "optimizer_s": 0.01, "learner_other_s": 0.0,
            "tokens_run": 1000, "padded_tokens_run": 1000, "trained_positions": 900, "completion_length": 16.0}


def _ours_round(steps: list[float]) -> dict[str, Any]:
    return {"step_s": steps, "step_cpu_s": steps, "phases": [_phase(s / 2, s / 2) for s in steps],
            "torch_version": "2.13.0+cpu"}


def test_rounds_pool_every_measured_step_and_drop_each_round_s_warmup(bench: Any) -> None:
    rounds = [_ours_round([9.0, 0.20, 0.22, 0.24]), _ours_round([8.0, 0.30, 0.32, 0.34])]
    ours = bench.summarize_ours(rounds, warm=1)
    assert ours["s_per_step"] == statistics.median([0.20, 0.22, 0.24, 0.30, 0.32, 0.34]) == pytest.approx(0.27)
    assert ours["generation_s"] == pytest.approx(0.135) and ours["fwd_bwd_s"] == pytest.approx(0.135)
    assert ours["step_s"] == [9.0, 0.20, 0.22, 0.24, 8.0, 0.30, 0.32, 0.34]  # every step kept for the record
    assert ours["mean_completion_length"] == 16.0

    trl_rounds = [{"step_s": [5.0, 0.5, 0.6], "step_cpu_s": [5.0, 0.5, 0.6], "step_generation_s": [1.0, 0.2, 0.3],
                   "step_lengths": [16.0, 16.0, 16.0], "trl_version": "1.16.0", "mean_completion_length": 16.0},
                  {"step_s": [4.0, 0.7, 0.8], "step_cpu_s": [4.0, 0.7, 0.8], "step_generation_s": [1.0, 0.4, 0.5],
                   "step_lengths": [16.0, 16.0, 16.0], "trl_version": "1.16.0", "mean_completion_length": 16.0}]
    trl = bench.summarize_trl(trl_rounds, warm=1)
    assert trl["s_per_step"] == pytest.approx(0.65) and trl["generation_s"] == pytest.approx(0.35)
    assert trl["trl_version"] == "1.16.0"
    per_round = [bench._round_figures(o, t, 1) for o, t in zip(rounds, trl_rounds, strict=True)]
    assert [r["ratio"] for r in per_round] == [pytest.approx(0.22 / 0.55), pytest.approx(0.32 / 0.75)]


def test_a_failed_trl_round_is_the_reported_error(bench: Any) -> None:
    ok = {"step_s": [1.0, 0.5], "step_cpu_s": [1.0, 0.5], "mean_completion_length": 16.0}
    out = bench.summarize_trl([ok, {"error": "TRL exited with 1: boom"}], warm=1)
    assert out == {"error": "TRL exited with 1: boom"}


def test_size_presets_and_flags_that_override_them(bench: Any) -> None:
    args = bench.parse_args(["--size", "25m", "--layers", "4"])
    model = bench.workload(args)["model"]
    assert (model["hidden_size"], model["intermediate_size"], model["num_hidden_layers"]) == (512, 1536, 4)
    assert bench.workload(bench.parse_args([]))["model"]["hidden_size"] == 128  # 0.8M stays the default
    big = bench.workload(bench.parse_args(["--size", "104m"]))["model"]
    assert (big["hidden_size"], big["num_hidden_layers"], big["num_key_value_heads"]) == (768, 12, 4)
    with pytest.raises(SystemExit):
        bench.parse_args(["--rounds", "0"])
