"""Several passes per batch take the old policy's log-probabilities from the first pass's own forward.

With ``num_iterations > 1`` the clipped ratio needs the log-probabilities of the policy that
generated the batch. That policy is exactly the model the first pass runs (the optimizer steps
only at the end of a pass), so the learner keeps the first pass's values instead of running a
separate no-grad forward over the whole batch. These tests hold it to "same update, one forward
fewer": the gradients of every pass match the recomputing learner's, and the forward count is
one per micro-batch and pass.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from trainers.grpo.learn import step as learn_step
from trainers.grpo.learn.step import Learner, StepPlan


class RecomputingLearner(Learner):
    """The learner as it was: the old log-probabilities from a no-grad pass before the first pass."""

    def fixed_logps(self, plan: StepPlan) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        old, ref = super().fixed_logps(plan)
        if old is not None:
            old = self.logps_no_grad(self.policy.model, plan.batch, self.cfg.gradient_accumulation_steps)
        return old, ref

    def _micro_batch(self, plan: StepPlan, part: torch.Tensor, old: torch.Tensor | None, ref: torch.Tensor | None,
                     *, last: bool, first: bool = True, measure: bool = False, pad: bool = False) -> dict[str, Any]:
        return super()._micro_batch(plan, part, old, ref, last=last, first=False, measure=measure, pad=pad)


def _passes(trainer: Any, batch: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, float], list[Any], int]:
    """One `_train_on` with the weights held still: its metrics, the gradients it stepped on, and
    how many times the model ran (`completion_logps` calls, with or without gradient)."""
    grads: list[Any] = []
    calls = [0]
    real = learn_step.completion_logps

    def counted(*a: Any, **k: Any) -> Any:
        calls[0] += 1
        return real(*a, **k)

    monkeypatch.setattr(learn_step, "completion_logps", counted)
    monkeypatch.setattr(trainer.optimizer, "step",
                        lambda *a, **k: grads.extend(p.grad.detach().clone() for p in trainer.params))
    return trainer._train_on(batch), grads, calls[0]


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before")
def test_the_first_pass_gives_the_old_logprobs_with_the_same_update(
    generated_batch: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    trainer, batch = generated_batch(num_iterations=2, gradient_accumulation_steps=2, skip_zero_advantage=False)
    batch.advantages = torch.linspace(-1.0, 1.0, len(batch))
    learner = trainer.learner
    reused, reused_grads, reused_calls = _passes(trainer, batch, monkeypatch)
    trainer.learner = RecomputingLearner(learner.cfg, learner.preset, learner.dist, learner.policy,
                                         updating=learner.updating, with_expert=learner.with_expert,
                                         on_commit=learner.on_commit)
    again, again_grads, again_calls = _passes(trainer, batch, monkeypatch)
    assert reused_calls == 2 * 2  # passes x micro-batches: no separate pass for the old policy
    assert again_calls == reused_calls + 2  # the recomputing learner's no-grad pass, in 2 chunks
    assert len(reused_grads) == len(again_grads) == 2 * len(trainer.params)  # one optimizer step per pass
    for a, b in zip(reused_grads, again_grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)
    assert reused["loss"] == pytest.approx(again["loss"], rel=1e-4, abs=1e-7)
    assert reused["grad_norm"] == pytest.approx(again["grad_norm"], rel=1e-4)
    assert reused["grad_norm"] > 0
