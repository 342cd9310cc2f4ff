"""`benchmarks/trainer_step.py`: how rounds pool into the reported figures, the size presets, the
device flags, the GPU phase timing and where TRL's side runs.

The trainers themselves run in the benchmark (minutes); here the pooling is checked on step
lists whose medians differ depending on whether each round's warm-up steps are dropped, so a
figure taken from one round only, or with a warm-up step left in, fails.
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
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


def test_device_flags_defaults_and_gpu_presets(bench: Any) -> None:
    cpu = bench.parse_args([])
    assert (cpu.device, cpu.mixed_precision, cpu.max_tokens) == ("cpu", "no", 16)  # the CPU workload as before
    gpu = bench.workload(bench.parse_args(["--device", "cuda", "--mixed-precision", "bf16", "--size", "250m"]))
    assert (gpu["device"], gpu["mixed_precision"], gpu["max_tokens"], gpu["min_tokens"]) == ("cuda", "bf16", 128, 128)
    m = gpu["model"]
    assert (m["hidden_size"], m["intermediate_size"], m["num_hidden_layers"], m["num_attention_heads"],
            m["num_key_value_heads"]) == (1024, 4096, 16, 16, 8)
    m = bench.workload(bench.parse_args(["--size", "1b"]))["model"]
    assert (m["hidden_size"], m["intermediate_size"], m["num_hidden_layers"], m["num_attention_heads"],
            m["num_key_value_heads"]) == (2048, 5632, 22, 32, 4)
    assert bench.parse_args(["--device", "cuda", "--max-tokens", "32"]).max_tokens == 32
    with pytest.raises(SystemExit):
        bench.parse_args(["--mixed-precision", "fp16"])


def test_phase_timer_waits_for_the_device_around_every_phase(bench: Any) -> None:
    """On a GPU a phase's clock must not stop while its kernels are still queued."""
    import torch

    log: list[str] = []
    batch = SimpleNamespace(attention_mask=torch.ones(2, 5, dtype=torch.long), loss_mask=torch.ones(2, 4),
                            prompt_lens=None, prompt_ids=None)
    plan = SimpleNamespace(batch=batch)

    class Learner:
        policy = SimpleNamespace(share_prompts=lambda: False)

        def fixed_logps(self) -> None:
            log.append("logprobs")

        def one_pass(self) -> None:
            log.append("pass")
            self._micro_batch(plan, torch.arange(2))

        def _micro_batch(self, plan: Any, part: Any) -> None:
            log.append("micro")

    learner = Learner()
    timer = bench.PhaseTimer(learner, sync=lambda: log.append("sync"))
    learner.fixed_logps()
    learner.one_pass()
    for phase in ("logprobs", "pass", "micro"):
        i = log.index(phase)
        assert log[i - 1] == "sync" and log[i + 1] == "sync", log
    assert log[-1] == "sync"  # the pass (optimizer) clock stops after a wait too
    assert timer.snapshot()["tokens_run"] == 8  # 2 rows x (5 - 1)


def test_trl_resolution_never_installs_on_cuda(bench: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = sys.modules[bench.resolve_trl.__module__]  # benchmarks/_trl_runtime.py, where resolution lives
    monkeypatch.setattr(runtime, "ensure_trl_venv", lambda: pytest.fail("no virtualenv is built on cuda"))
    monkeypatch.setattr(runtime, "probe_trl", lambda python, keep: f"{python}: No module named 'trl'")
    missing = bench.resolve_trl("cuda", None)
    assert isinstance(missing, str) and "--trl-python" in missing and "pip install --target" in missing
    monkeypatch.setattr(runtime, "probe_trl", lambda python, keep: {"trl": "1.20.0", "torch": "2.11.0", "cuda": True})
    found = bench.resolve_trl("cuda", None)  # any version on cuda, in this interpreter and environment
    assert (found.python, found.keep_env, found.trl_version) == (sys.executable, True, "1.20.0")
    monkeypatch.setattr(runtime, "probe_trl", lambda python, keep: {"trl": "1.16.0", "torch": "2.13.0", "cuda": False})
    assert "sees no GPU" in bench.resolve_trl("cuda", None)
    # on a CPU another TRL version than the pinned one falls back to the pinned virtualenv
    monkeypatch.setattr(runtime, "probe_trl", lambda python, keep: {"trl": "1.20.0", "torch": "2.13.0", "cuda": False})
    monkeypatch.setattr(runtime, "ensure_trl_venv", lambda: Path("/venv/bin/python"))
    venv = bench.resolve_trl("cpu", None)
    assert (venv.python, venv.keep_env) == ("/venv/bin/python", False)


@pytest.mark.slow
def test_trl_from_a_target_install_keeps_pythonpath(bench: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``pip install --target DIR`` TRL is only importable through PYTHONPATH: the probe (and the
    TRL process, same environment) must keep it, a virtualenv's clean environment must not."""
    installed = importlib.util.find_spec("trl") is not None
    (tmp_path / "trl").mkdir()
    (tmp_path / "trl" / "__init__.py").write_text('__version__ = "0.0.target"\n')
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p))
    info = bench.probe_trl(sys.executable, True)
    assert isinstance(info, dict) and info["trl"] == "0.0.target", info
    assert bench._trl_env(2, True)["OMP_NUM_THREADS"] == "2"
    if not installed:
        assert "No module named 'trl'" in bench.probe_trl(sys.executable, False)


def test_a_real_model_trains_on_the_real_recipes_task_with_or_without_lora(bench: Any, tmp_path: Path) -> None:
    from verifiers.models.tiny import TinyModelSpec, save_tiny_model

    model_dir = save_tiny_model(tmp_path / "model", TinyModelSpec(hidden_size=32))
    full = bench.workload(bench.parse_args(["--model", str(model_dir)]))
    assert (full["env_id"], full["reward"], full["lora"], full["max_tokens"]) == ("arithmetic", "final_number", None, 32)
    assert "boxed" in full["env_args"]["system_prompt"]  # the recipe's own prompt, as vf-train gets it
    assert full["model"]["hidden_size"] == 32 and full["model"]["name"] == str(model_dir)
    lora = bench.workload(bench.parse_args(["--model", str(model_dir), "--lora", "--max-tokens", "128"]))
    assert lora["lora"]["r"] == 8 and lora["max_tokens"] == 128
    cfg = bench.our_config(lora, model_dir, tmp_path / "out")
    assert cfg.lora and cfg.lora_r == 8 and cfg.env_id == "arithmetic"
    assert bench.workload(bench.parse_args([]))["env_id"] == "letter-repeat"  # the tiny default is unchanged
