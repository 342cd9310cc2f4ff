"""What a first-time vf-train user trips over: config spelling, resume mismatches, eval output,
Hugging Face ids offline, and a GPU that goes unused."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from trainers.grpo.config import TrainConfig, load_config
from trainers.grpo.data.generator import check_resumable
from trainers.grpo.data.sampler import RepeatSampler
from trainers.grpo.run.reporting import curve_panels
from verifiers.errors import ConfigError
from verifiers.inference.engine import devices


@pytest.mark.parametrize(("value", "expected"), [("tensorboard", ["tensorboard"]), ("jsonl, wandb", ["jsonl", "wandb"]),
                                                 ('["jsonl"]', ["jsonl"])])
def test_report_to_takes_a_plain_string(value: str, expected: list[str]) -> None:
    assert load_config(None, ["--report_to", value]).report_to == expected


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["--learning_rat", "1"], "unknown key 'learning_rat': did you mean 'learning_rate'?"),
        (["--tiny_model.hidden", "8"], "unknown key 'tiny_model.hidden': did you mean 'tiny_model.hidden_size'?"),
        (["--zzz_nothing_alike", "1"], "unknown key 'zzz_nothing_alike': every key is listed in docs/training.md"),
    ],
)
def test_unknown_keys_suggest_the_closest_names_not_all_of_them(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(None, overrides)
    assert message in str(err.value)
    assert "warmup_steps" not in str(err.value)  # the ~50 known keys are no longer dumped


@pytest.mark.parametrize(
    ("saved", "now", "message"),
    [
        ({"mini_repeat_count": 4}, {"mini_repeat_count": 8},
         "the checkpoint was saved with num_generations = 4, this run has num_generations = 8"),
        ({"batch_size": 2}, {"batch_size": 3}, "the checkpoint was saved with prompts_per_step = 2"),
        ({"num_samples": 12}, {"num_samples": 10}, "the checkpoint's run had 12 training prompts, this run has 10"),
    ],
)
def test_resume_mismatch_is_named_in_config_terms(saved: dict[str, int], now: dict[str, int], message: str) -> None:
    def sampler(settings: dict[str, int]) -> RepeatSampler:
        s = {"num_samples": 12, "mini_repeat_count": 4, "batch_size": 2, **settings}
        return RepeatSampler(s["num_samples"], mini_repeat_count=s["mini_repeat_count"], batch_size=s["batch_size"])

    with pytest.raises(ConfigError) as err:
        check_resumable(sampler(saved).state_dict(), sampler(now))
    assert message in str(err.value)
    assert "mini_repeat_count" not in str(err.value) and "batch_size" not in str(err.value)


def test_eval_results_are_printed_logged_and_plotted(
    tmp_path: Path, train_config: Callable[..., TrainConfig], run_training: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A GPU machine with a CPU-only torch: the banner says so (one run serves both checks).
    monkeypatch.setattr(devices, "nvidia_gpu_present", lambda: True)
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    # log_every = 3 would skip step 2's row; its evaluation must still reach metrics.jsonl.
    cfg = train_config(tmp_path / "run", max_steps=3, eval_every=2, eval_num_examples=2, log_every=3, plot=True)
    run = run_training(cfg)
    printed = run.trainer.console.file.getvalue()
    assert "eval at step 2: reward " in printed
    assert "note: this machine has an NVIDIA GPU, but torch" in printed and "CPU-only build" in printed
    by_step = {r["step"]: r for r in run.rows}
    assert sorted(by_step) == [2, 3]
    assert 0.0 <= by_step[2]["eval/reward"] <= 1.0 and "eval/reward" not in by_step[3]
    assert "reward" in [key for key, _ in curve_panels(run.rows)]
    assert (tmp_path / "run" / "curves.png").stat().st_size > 0


def test_unknown_hugging_face_model_offline_is_a_config_error(
    tmp_path: Path, train_config: Callable[..., TrainConfig], run_training: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # In process (vf-serve's test runs the command); vf-train prints a ConfigError as one line, exit 2.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(ConfigError) as err:
        run_training(train_config(tmp_path / "run", model="vf-test-org/no-such-model"))
    assert "'vf-test-org/no-such-model' is not a local directory and not in the Hugging Face cache" in str(err.value)
    assert "HF_HUB_OFFLINE is set" in str(err.value)


def test_a_local_directory_is_still_a_directory(base_model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from verifiers.models.source import resolve_model

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert resolve_model(str(base_model_dir)) == base_model_dir


def test_usable_gpu_left_unused_is_noted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "Test GPU")
    assert devices.unused_gpu_note("cpu", "add --device cuda") == (
        "note: a CUDA GPU (Test GPU) is available but unused: add --device cuda")
    assert devices.unused_gpu_note("cuda:0", "add --device cuda") is None


def test_gpu_machine_with_a_cpu_torch_is_noted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(devices, "nvidia_gpu_present", lambda: True)
    note = devices.unused_gpu_note("cpu", "unused")
    assert note is not None and "has an NVIDIA GPU" in note and "CPU-only build" in note
    monkeypatch.setattr(devices, "nvidia_gpu_present", lambda: False)
    assert devices.unused_gpu_note("cpu", "unused") is None
