"""Every algorithm preset and the main switches (KL reference, LoRA, gradient checkpointing,
generating ahead, several passes per batch) run end to end on the tiny model."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from trainers.grpo.algo.algorithms import ALGORITHMS
from trainers.grpo.config import TrainConfig
from trainers.grpo.trainer import GRPOTrainer
from verifiers.inference.engine.sampling import SamplingParams

PRESETS = ["grpo", "dr_grpo", "dapo", "gspo", "cispo", "mix"]


class SnapshotTrainer(GRPOTrainer):
    """Keeps a copy of every parameter (trainable or not) as it was before the first step."""

    def setup(self) -> None:
        super().setup()
        self.before = {n: p.detach().clone() for n, p in self.model.named_parameters()}


def changed(trainer: SnapshotTrainer) -> dict[str, bool]:
    return {n: not torch.equal(trainer.before[n], p.detach()) for n, p in trainer.model.named_parameters()}


def finite(rows: list[dict[str, Any]], key: str) -> bool:
    return all(isinstance(r.get(key), float) and math.isfinite(r[key]) for r in rows)


@pytest.fixture
def expert_file(tmp_path: Path) -> Path:
    """Expert chat data for MIX: the answers a perfect letter-repeat model would give."""
    path = tmp_path / "expert.jsonl"
    rows = [
        {"messages": [{"role": "user", "content": f"Say {c}"}, {"role": "assistant", "content": c}]} for c in "abcd"
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_presets_under_test_are_all_the_presets() -> None:
    assert sorted(PRESETS) == sorted(ALGORITHMS)


@pytest.mark.parametrize("algorithm", PRESETS)
def test_preset_runs_two_steps_with_finite_loss(
    algorithm: str,
    tmp_path: Path,
    expert_file: Path,
    train_config: Callable[..., TrainConfig],
    run_training: Callable[..., Any],
) -> None:
    extra: dict[str, Any] = {"expert_data": str(expert_file)} if algorithm == "mix" else {}
    cfg = train_config(tmp_path / "run", algorithm=algorithm, max_steps=2, **extra)
    run = run_training(cfg)
    assert [r["step"] for r in run.rows] == [1, 2]
    assert finite(run.rows, "loss") and finite(run.rows, "grad_norm")
    if algorithm != "dapo":  # dapo masks truncated completions: with 4 tokens a step may train on none
        assert any(r["grad_norm"] > 0 for r in run.rows)
    if algorithm == "mix":
        mu = ALGORITHMS["mix"].mix.mu  # type: ignore[union-attr]
        for r in run.rows:
            assert r["loss/sft"] > 0  # -log p of expert tokens under a random model
            assert r["loss"] == pytest.approx((1 - mu) * r["loss/rl"] + mu * r["loss/sft"], rel=1e-5, abs=1e-7)
            # the expert rows are extra: the RL rows are still the full batch
            assert r["rollouts/trained"] == cfg.rows_per_step


def test_beta_loads_a_reference_model_and_logs_kl(
    tmp_path: Path, train_config: Callable[..., TrainConfig], run_training: Callable[..., Any]
) -> None:
    cfg = train_config(tmp_path / "run", max_steps=2, algorithm_overrides={"beta": 0.05})
    run = run_training(cfg, trainer_cls=SnapshotTrainer)
    trainer = run.trainer
    assert trainer.ref_model is not None and trainer.ref_model is not trainer.model
    assert not any(p.requires_grad for p in trainer.ref_model.parameters())
    for name, p in trainer.ref_model.named_parameters():  # the reference stays the initial policy
        assert torch.equal(p, trainer.before[name]), name
    kl = [r["kl"] for r in run.rows]
    assert kl[0] == pytest.approx(0.0, abs=1e-6)  # step 1: the policy is still the reference
    assert kl[1] > 0  # step 2: one update away from it


def test_lora_trains_only_adapters_and_the_engine_serves_them(
    tmp_path: Path, train_config: Callable[..., TrainConfig], run_training: Callable[..., Any]
) -> None:
    pytest.importorskip("peft")
    cfg = train_config(tmp_path / "run", max_steps=2, lora=True)
    run = run_training(cfg, trainer_cls=SnapshotTrainer)
    trainer = run.trainer
    assert finite(run.rows, "loss")
    trainable = {n for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    moved = changed(trainer)
    assert all(moved[n] for n in trainable)  # lora_B moves at step 1, lora_A from step 2 on
    assert not any(moved[n] for n in moved if n not in trainable)  # base weights untouched

    engine = trainer.sync.engine
    assert engine.weight_version == 2
    assert {id(p) for p in trainer.params} <= {id(p) for p in engine.model.parameters()}  # the peft model
    prompt = trainer.tokenizer("Say q", add_special_tokens=False)["input_ids"]
    engine.start()
    try:
        out = engine.generate_sync(prompt, SamplingParams(max_tokens=1, temperature=1.0, logprobs=True, seed=5))
    finally:
        engine.stop()
    token, served = out.outputs[0].token_ids[0], out.outputs[0].logprobs[0]
    ids = torch.tensor([prompt])
    with torch.no_grad():
        with_adapters = torch.log_softmax(engine.model(input_ids=ids).logits[0, -1].float(), -1)[token]
        with engine.model.disable_adapter():
            base = torch.log_softmax(engine.model(input_ids=ids).logits[0, -1].float(), -1)[token]
    assert served == pytest.approx(float(with_adapters), abs=1e-5)
    assert abs(float(with_adapters) - float(base)) > 1e-6  # the adapters change what is served

    # the saved final model is the merged one: loads without peft and matches the adapters
    from verifiers.inference.engine.loading import load_model_and_tokenizer

    final, _ = load_model_and_tokenizer(tmp_path / "run" / "final_model")
    with torch.no_grad():
        merged = torch.log_softmax(final(input_ids=ids).logits[0, -1].float(), -1)[token]
    assert float(merged) == pytest.approx(float(with_adapters), abs=1e-5)


def test_gradient_checkpointing_runs(
    tmp_path: Path, train_config: Callable[..., TrainConfig], run_training: Callable[..., Any]
) -> None:
    run = run_training(train_config(tmp_path / "run", max_steps=2, gradient_checkpointing=True),
                       trainer_cls=SnapshotTrainer)
    assert finite(run.rows, "loss") and any(r["grad_norm"] > 0 for r in run.rows)
    assert all(changed(run.trainer).values())
    assert not run.trainer.model.training  # back in eval mode: no dropout while generating


def test_generating_one_batch_ahead_is_at_most_one_version_stale(
    tmp_path: Path, train_config: Callable[..., TrainConfig], run_training: Callable[..., Any]
) -> None:
    run = run_training(train_config(tmp_path / "run", max_steps=3, num_batches_ahead=1))
    staleness = [r["staleness"] for r in run.rows]
    assert max(staleness) <= 1
    # batch 1 was generated while step 1 trained, so from step 2 on the data is one version old
    assert staleness[1:] == [1.0, 1.0]
    assert finite(run.rows, "loss")


def test_two_iterations_step_the_optimizer_twice_per_batch(
    tmp_path: Path, train_config: Callable[..., TrainConfig], run_training: Callable[..., Any]
) -> None:
    run = run_training(train_config(tmp_path / "run", max_steps=2, num_iterations=2))
    assert finite(run.rows, "loss")
    steps = {int(s["step"]) for s in run.trainer.optimizer.state.values()}
    assert steps == {4}  # 2 generation steps x 2 passes
    # the second pass is off-policy (ratio != 1): something gets clipped or the loss moves off 0
    assert any(r["clip_ratio/region_mean"] > 0 or abs(r["loss"]) > 1e-6 for r in run.rows)
