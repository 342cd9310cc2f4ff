"""Rows whose advantage is 0 everywhere are left out of the learner's pass, and the update does not change.

Early in a run most groups score alike, so most RL rows have advantage 0; training on them costs
most of a step for nothing. `rows_with_gradient` says which rows can matter, and the trainer
runs only those (`skip_zero_advantage`). These tests hold it to "same update": the same loss,
gradient and entropy metric as the full pass, including the step where no row is left.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from trainers.grpo.algo.algorithms import get_algorithm, rows_with_gradient


def test_rows_with_gradient_keeps_nonzero_advantages_and_expert_rows() -> None:
    grpo = get_algorithm("grpo")
    adv = torch.tensor([0.0, 0.5, 0.0, -1.0])
    expert = torch.tensor([False, False, True, False])
    assert rows_with_gradient(grpo, adv, expert).tolist() == [False, True, True, True]
    per_token = torch.tensor([[0.0, 0.0], [0.0, 0.3], [0.0, 0.0]])
    assert rows_with_gradient(grpo, per_token, torch.zeros(3, dtype=torch.bool)).tolist() == [False, True, False]


@pytest.mark.parametrize("override", [{"beta": 0.04}, {"entropy_coef": 0.01}, {"policy_loss": "sft"}])
def test_every_row_counts_when_a_term_does_not_depend_on_the_advantage(override: dict[str, float]) -> None:
    preset = get_algorithm("grpo", **override)
    assert rows_with_gradient(preset, torch.zeros(3), torch.zeros(3, dtype=torch.bool)).all()


def _step(trainer: Any, batch: Any, skip: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, float], list[Any]]:
    """One `_train_on` with the weights held still; returns its metrics and the gradient it stepped on."""
    grads: list[Any] = []
    monkeypatch.setattr(trainer.optimizer, "step",
                        lambda *a, **k: grads.extend(p.grad.detach().clone() for p in trainer.params))
    trainer.cfg.skip_zero_advantage = skip
    return trainer._train_on(batch), grads


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before")
def test_skipping_zero_advantage_rows_gives_the_same_update(
    generated_batch: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    trainer, batch = generated_batch()
    # half the groups scored alike: their rows have advantage 0
    batch.advantages = torch.where(batch.group_ids % 2 == 0, torch.zeros_like(batch.advantages),
                                   torch.linspace(-1.0, 1.0, len(batch)))
    full, full_grads = _step(trainer, batch, False, monkeypatch)
    fast, fast_grads = _step(trainer, batch, True, monkeypatch)
    assert full["rows_skipped"] == 0
    assert fast["rows_skipped"] == int((batch.advantages == 0).sum()) > 0
    assert fast["loss"] == pytest.approx(full["loss"], rel=1e-5, abs=1e-7)
    assert fast["grad_norm"] == pytest.approx(full["grad_norm"], rel=1e-5)
    assert fast["grad_norm"] > 0
    for a, b in zip(fast_grads, full_grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-7, rtol=1e-5)
    # the entropy metric is the mean over the rows trained, not diluted by the rows left out
    live_only, _ = _step(trainer, batch.select((batch.advantages != 0).nonzero()[:, 0]), False, monkeypatch)
    assert fast["entropy"] == pytest.approx(live_only["entropy"], rel=1e-5)


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before")
def test_a_step_with_no_row_left_still_steps_on_a_zero_gradient(
    generated_batch: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    trainer, batch = generated_batch()
    batch.advantages = torch.zeros_like(batch.advantages)  # every group scored alike
    full, full_grads = _step(trainer, batch, False, monkeypatch)
    fast, fast_grads = _step(trainer, batch, True, monkeypatch)
    assert fast["rows_skipped"] == len(batch)
    assert fast["loss"] == full["loss"] == 0.0
    assert fast["grad_norm"] == full["grad_norm"] == 0.0
    # the optimizer still steps (Adam's moments and the scheduler move as they would), on zeros
    assert len(fast_grads) == len(full_grads) > 0
    assert all(not g.any() for g in fast_grads)
    assert "entropy" not in fast and "entropy" in full
