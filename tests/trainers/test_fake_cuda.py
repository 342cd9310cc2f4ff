"""GPU device placement, proven on the CPU: the trainer's step under a fake ``cuda:0``.

`trainers.testing.fake_cuda` makes tensors that report ``cuda:0`` and fail on every op that
would mix devices on a real GPU. A training step is generated for real on the CPU (embedded
engine), then built, scored and trained with the model, the reference model and the batch on
the fake GPU: the learner's logprob paths (shared-prompt, plain, reference, old-policy), the
loss, backward, gradient clipping, the optimizer and the scheduler all run there.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from trainers.testing.fake_cuda import CUDA, CrossDeviceError, FakeCudaTensor, fake_cuda


# -- the harness itself ---------------------------------------------------------------------
def test_cross_device_ops_fail_like_on_a_gpu() -> None:
    with fake_cuda():
        x = torch.arange(6, dtype=torch.float32).reshape(3, 2).to(CUDA)
        assert x.device == CUDA and x.is_cuda
        with pytest.raises(CrossDeviceError, match="index_select"):
            x.index_select(0, torch.tensor([0, 2]))  # a CPU index for CUDA tensors
        with pytest.raises(CrossDeviceError):
            x + torch.ones(3, 2)
        with pytest.raises(CrossDeviceError, match="multinomial"):
            torch.multinomial(torch.ones(2, 4, device=CUDA), 1, generator=torch.Generator().manual_seed(0))
        # what real CUDA allows: CPU scalars, CPU indices of x[idx], copies, generators of the device
        assert (x * torch.tensor(2.0)).device == CUDA
        assert x[torch.tensor([0, 2])].device == CUDA
        torch.multinomial(torch.ones(2, 4, device=CUDA), 1, generator=torch.Generator(device=CUDA).manual_seed(0))
        x[0] = torch.tensor([7.0, 8.0])
        assert x.cpu().tolist()[0] == [7.0, 8.0]


def test_host_round_trips_are_counted() -> None:
    with fake_cuda() as check:
        x = torch.ones(4, device=CUDA)
        check.reset()
        y = x * 2  # stays on the device
        assert check.host_syncs == 0
        assert float(y.sum()) == 8.0 and int(y[0]) == 2
        assert y.tolist() == [2.0] * 4
        out = y.cpu()
        assert type(out) is torch.Tensor and out.device.type == "cpu"
        assert check.host_syncs == 4


def test_a_cpu_shuffle_of_a_gpu_batch_is_caught(train_config: Callable[..., Any], tmp_path: Path) -> None:
    """The crash a read of the trainer found: the harness must catch it, or it proves nothing."""
    from trainers.grpo.data.batch import TrainRow, collate

    rows = [TrainRow([1, 2, 3, 4], [0, 1, 1], [0.0, -1.0, -1.0], 1.0, 0, False, 2, prompt_len=2) for _ in range(4)]
    with fake_cuda():
        batch = collate(rows, 0).to(CUDA)
        perm = torch.randperm(len(batch), generator=torch.Generator().manual_seed(0))
        with pytest.raises(CrossDeviceError):
            batch.select(perm)
        assert batch.select(perm.to(batch.input_ids.device)).input_ids.device == CUDA


@pytest.mark.parametrize("share", [True, False])
def test_learner_host_round_trips_do_not_grow_with_the_batch(share: bool) -> None:
    """The logprob pass reads per-row facts from the device once, not once per row."""
    from trainers.grpo.data.batch import TrainRow, collate
    from trainers.grpo.learn.logprobs import completion_logps
    from verifiers.models.tiny import TinyModelSpec, build_tiny_model

    torch.manual_seed(0)
    model, _ = build_tiny_model(TinyModelSpec(hidden_size=32))

    def rows(groups: int) -> list[TrainRow]:
        out = []
        for g in range(groups):
            prompt = [5 + g, 6, 7, 8][: 2 + g % 3]
            for k in range(4):
                comp = [9 + k, 10, 11][: 1 + (g + k) % 3]
                ids = prompt + comp
                mask = [0] * (len(prompt) - 1) + [1] * len(comp)
                out.append(TrainRow(ids, mask, [0.0] * (len(ids) - 1), 0.0, g, False, len(comp),
                                    prompt_len=len(prompt)))
        return out

    counts = []
    with fake_cuda() as check:
        model.to(CUDA)
        for groups in (2, 8):
            batch = collate(rows(groups), 0).to(CUDA)
            completion_logps(model, batch, share_prompts=share)  # the one-time head check runs here
            check.reset()
            logp, _ = completion_logps(model, batch, share_prompts=share)
            logp.sum().backward()
            assert logp.device == CUDA
            counts.append(check.host_syncs)
    assert counts[0] == counts[1] and counts[0] <= 3, counts


# -- the trainer's step ---------------------------------------------------------------------
CASES = {
    # reference pass (beta), old-policy pass (2 iterations), shared prompts, 2 micro-batches
    "kl-iterations": {"algorithm_overrides": {"beta": 0.04}, "num_iterations": 2, "gradient_accumulation_steps": 2},
    # LoRA: the reference is the policy with its adapters off
    "lora-kl": {"lora": True, "algorithm_overrides": {"beta": 0.04}},
    # gradient checkpointing takes the plain (unshared) logprob path
    "checkpointing": {"gradient_checkpointing": True},
    # bf16 autocast over float32 weights (autocast itself is off on a fake device: placement only)
    "entropy-bf16": {"algorithm_overrides": {"entropy_coef": 0.01}, "mixed_precision": "bf16"},
}


def _trainer(train_config: Callable[..., Any], out: Path, **overrides: Any) -> Any:
    from rich.console import Console

    from trainers.grpo.trainer import GRPOTrainer

    trainer = GRPOTrainer(train_config(out, **overrides), console=Console(file=io.StringIO()))
    trainer.setup()
    return trainer


@pytest.mark.parametrize("case", list(CASES))
def test_training_step_runs_on_a_fake_gpu(train_config: Callable[..., Any], tmp_path: Path, case: str) -> None:
    trainer = _trainer(train_config, tmp_path, **CASES[case])
    try:
        groups, _, _ = trainer._take_batch()  # generated for real on the CPU
    finally:
        trainer.sync.close()  # the engine thread must not touch the model once it is "on the GPU"
        trainer.generator.close()
    model = trainer.accelerator.unwrap_model(trainer.model)
    before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    with fake_cuda() as check:
        model.to(CUDA)
        if trainer.ref_model is not None:
            trainer.ref_model.to(CUDA)
        trainer.device = CUDA
        batch, metrics = trainer._build(groups)
        assert batch.input_ids.device == CUDA and batch.advantages.device == CUDA
        check.reset()
        out = trainer._optimize(batch)
        params = dict(model.named_parameters())
        assert all(isinstance(p, FakeCudaTensor) for p in params.values())
        for state in trainer.optimizer.state.values():
            assert state["exp_avg"].device == CUDA
        moved = [n for n, p in params.items() if p.requires_grad and not torch.equal(p.cpu(), before[n])]
    assert moved, "the step changed no weight"
    assert torch.isfinite(torch.tensor(out["grad_norm"])) and out["grad_norm"] > 0
    assert metrics["rollouts/trained"] == trainer.cfg.rows_per_step


def test_trainer_step_fails_on_a_fake_gpu_without_the_fix(
    train_config: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Put the CPU permutation back: the same step must now fail, as it would on a GPU."""
    trainer = _trainer(train_config, tmp_path)
    try:
        groups, _, _ = trainer._take_batch()
    finally:
        trainer.sync.close()
        trainer.generator.close()
    real_randperm = torch.randperm

    def randperm(*args: Any, **kwargs: Any) -> torch.Tensor:
        perm = real_randperm(*args, **kwargs)
        perm.to = lambda *a, **k: perm  # type: ignore[method-assign]  # "forgets" to move it
        return perm

    monkeypatch.setattr(torch, "randperm", randperm)
    with fake_cuda():
        trainer.accelerator.unwrap_model(trainer.model).to(CUDA)
        trainer.device = CUDA
        batch, _ = trainer._build(groups)
        with pytest.raises(CrossDeviceError, match="index_select"):
            trainer._optimize(batch)
