"""The learner step: one optimizer step (or ``num_iterations``) on a built batch.

Read in order: `Learner.plan` (the loss mask, the global normaliser and the rows that carry a
gradient), `Learner.fixed_logps` (the old policy's and the reference's log-probabilities,
without gradient), `Learner.one_pass` (micro-batches, clip, optimizer step) and
`Learner.metrics`. Each micro-batch's loss is already its *share* of the full-batch loss, so
the gradients add up to the same value for any split.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from trainers.grpo.algo.algorithms import AlgorithmPreset, compute_loss, rows_with_gradient
from trainers.grpo.algo.losses import LossNormalizer, mask_truncated, rollout_token_counts
from trainers.grpo.algo.mismatch import MismatchStats
from trainers.grpo.data.batch import TrainBatch
from trainers.grpo.data.microbatch import micro_batches
from trainers.grpo.dist.ranks import Dist
from trainers.grpo.learn.logprobs import completion_logps
from trainers.grpo.learn.packed_linear import packed_once
from trainers.grpo.learn.policy import Policy


def global_normalizer(dist: Dist, local: LossNormalizer) -> LossNormalizer:
    """The normaliser of the union batch: every rank then divides by the same global counts."""
    if not dist.active:
        return local
    return LossNormalizer.combine([LossNormalizer(**p) for p in dist.gather(local.model_dump())])


@dataclass
class StepPlan:
    """What one step trains on: the (possibly reduced) batch and the loss's normaliser."""

    batch: TrainBatch
    normalizer: LossNormalizer
    rl_tokens: int  # RL tokens that are trained (all of them unless rows were skipped)
    skipped: int  # rows skipped for a zero advantage
    idle: bool  # no row left: the step is the optimizer's on a zero gradient


class Learner:
    """Runs the policy update; ``updating`` pauses an engine that shares the model, ``on_commit``
    is called right before the first optimizer step changes the weights."""

    def __init__(self, cfg: Any, preset: AlgorithmPreset, dist: Dist, policy: Policy, *,
                 updating: Callable[[], contextlib.AbstractContextManager[Any]], with_expert: bool,
                 on_commit: Callable[[], None]) -> None:
        self.cfg = cfg
        self.preset = preset
        self.dist = dist
        self.policy = policy
        self.updating = updating
        self.with_expert = with_expert
        self.on_commit = on_commit
        self.mismatch = MismatchStats()

    def train_on(self, batch: TrainBatch, step: int) -> dict[str, float]:
        """Train on ``batch`` for ``num_iterations`` passes; this rank's metrics."""
        cfg, model = self.cfg, self.policy.model
        plan = self.plan(batch)
        old, ref = self.fixed_logps(plan)
        self.mismatch = MismatchStats()
        sums: dict[str, float] = {}
        grad_norms = []
        paused = contextlib.ExitStack()
        if cfg.gradient_checkpointing:
            # Checkpointing only acts in train mode, where transformers also switches the KV cache
            # off; an embedded engine decoding this same model meanwhile would break, so it waits.
            paused.enter_context(self.updating())
            model.train()
        try:
            for it in range(cfg.num_iterations):
                grad_norms.append(self.one_pass(plan, old, ref, step, it, sums))
        finally:
            if cfg.gradient_checkpointing:
                model.eval()
            paused.close()
        return self.metrics(plan, sums, grad_norms)

    def plan(self, batch: TrainBatch) -> StepPlan:
        """The loss mask, the global normaliser, and the rows left after skipping zero advantages."""
        cfg, preset = self.cfg, self.preset
        mask = batch.loss_mask
        if preset.mask_truncated_completions:
            mask = mask_truncated(mask, batch.is_truncated)
        batch.loss_mask = mask
        # A rollout of several rows is one sequence of the loss: its rows share its token count.
        # Rollouts are whole on each rank (their groups are), so the counts are local.
        if batch.rollout_ids is not None:
            batch.sequence_tokens = rollout_token_counts(mask, batch.rollout_ids)
        # Several processes: every rank divides by the counts of the union batch (see `Policy.backward`).
        normalizer = global_normalizer(
            self.dist, LossNormalizer.from_batch(mask, is_expert=batch.is_expert, max_completion_len=cfg.max_tokens,
                                                 rollout_ids=batch.rollout_ids))
        rl_tokens = normalizer.num_active_tokens
        skipped, idle = 0, False
        if cfg.skip_zero_advantage and not self.dist.active:  # DDP needs the same backward calls on every rank
            assert batch.advantages is not None
            live = rows_with_gradient(preset, batch.advantages, batch.is_expert)
            skipped = int((~live).sum())
            if skipped and bool(live.any()):
                rl_tokens = int(batch.loss_mask[live & ~batch.is_expert].sum())
                batch = batch.select(live.nonzero()[:, 0])
            elif skipped:
                rl_tokens, idle = 0, True
        return StepPlan(batch, normalizer, rl_tokens, skipped, idle)

    def fixed_logps(self, plan: StepPlan) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """The buffer for the old policy's log-probabilities (several passes) and the reference's (KL).

        The old policy is the model before this step's first optimizer step, which is exactly the
        model the first pass runs: its micro-batches fill ``old`` from their own forward
        (`_micro_batch`), so no separate no-grad pass recomputes them. The reference's are computed
        here, without gradient.
        """
        chunks = self.cfg.gradient_accumulation_steps
        old = None
        if self.cfg.num_iterations > 1 and not plan.idle:
            old = torch.zeros_like(plan.batch.sampler_logp)
        ref = None
        if self.preset.uses_reference:
            with self.policy.reference(self.updating) as ref_model:
                ref = self.logps_no_grad(ref_model, plan.batch, chunks)
        return old, ref

    def logps_no_grad(self, model: Any, batch: TrainBatch, chunks: int) -> torch.Tensor:
        out = torch.zeros_like(batch.sampler_logp)
        device = batch.input_ids.device
        if self.cfg.micro_batch_tokens is None:
            parts = list(torch.arange(len(batch), device=device).chunk(chunks))
        else:  # by the token budget; unshuffled, since the values do not depend on the split
            parts = [p.to(device) for p in micro_batches(batch, self.cfg.micro_batch_tokens)]
        real = len(parts)
        parts = self._even(parts)
        with torch.no_grad(), packed_once():
            for i, part in enumerate(parts):
                sub = batch.select(part)
                lp, _ = completion_logps(model, sub, self.cfg.temperature, with_entropy=False,
                                         chunk_tokens=self.cfg.logprob_chunk_tokens)
                if i < real:  # a padding pass (FSDP) only keeps the ranks' collectives in step
                    out[part, : lp.shape[1]] = lp
        return out

    def _even(self, parts: list[torch.Tensor]) -> list[torch.Tensor]:
        """Under FSDP, ``parts`` padded to the largest count of any rank with one-row repeats.

        Every FSDP forward and backward all-gathers and reduce-scatters with every other rank,
        so a rank with fewer micro-batches would leave the others waiting forever; its extra
        passes run on its first row and count zero (`_micro_batch`'s ``pad``).
        """
        if not self.policy.sharded:
            return parts
        most = max(self.dist.gather(len(parts)))
        if most > len(parts) and not parts:
            raise RuntimeError(f"rank {self.dist.rank} has no rows to train on while others do; FSDP needs every "
                               "rank to run the same passes (every rollout of its groups was dropped)")
        return parts + [parts[0][:1] for _ in range(most - len(parts))]

    def one_pass(self, plan: StepPlan, old: torch.Tensor | None, ref: torch.Tensor | None, step: int, it: int,
                 sums: dict[str, float]) -> float:
        """One pass over the batch in micro-batches, then clip and step; returns the gradient norm."""
        cfg, policy = self.cfg, self.policy
        gen = torch.Generator().manual_seed(cfg.seed * 100_003 + step * 101 + it)
        parts = self._parts(plan, gen)
        real = len(parts)
        parts = self._even(parts)
        with packed_once():  # no weight changes until the optimizer steps below
            for i, part in enumerate(parts):
                # The sampler's logprobs are at temperature 1 (the raw log-softmax): comparable only then.
                m = self._micro_batch(plan, part, old, ref, last=i == len(parts) - 1, first=it == 0,
                                      measure=it == 0 and cfg.temperature == 1.0, pad=i >= real)
                for k, v in m.items():
                    sums[k] = sums.get(k, 0.0) + float(v) / cfg.num_iterations
        gn = policy.clip_grad_norm(cfg.max_grad_norm)
        self.on_commit()  # from here on the step is finished, not abandoned
        with self.updating():
            policy.optimizer.step()
        policy.scheduler.step()
        policy.optimizer.zero_grad(set_to_none=True)
        return float(gn)

    def _parts(self, plan: StepPlan, gen: torch.Generator) -> list[torch.Tensor]:
        """This pass's micro-batches: row indices, in a seeded order."""
        batch = plan.batch
        # Seeded on the CPU (the same order on every device), used where the batch lives:
        # index_select refuses a CPU index for CUDA tensors.
        if plan.idle:
            for p in self.policy.params:
                p.grad = torch.zeros_like(p)
            return []
        if self.cfg.micro_batch_tokens is None:
            perm = torch.randperm(len(batch), generator=gen).to(batch.input_ids.device)
            return list(perm.chunk(self.cfg.gradient_accumulation_steps))
        # by the token budget, rows of similar length together, groups whole
        plan_parts = micro_batches(batch, self.cfg.micro_batch_tokens, generator=gen)
        return [p.to(batch.input_ids.device) for p in plan_parts]

    def _micro_batch(self, plan: StepPlan, part: torch.Tensor, old: torch.Tensor | None, ref: torch.Tensor | None,
                     *, last: bool, first: bool = True, measure: bool = False, pad: bool = False) -> dict[str, Any]:
        """Forward, loss and backward of one micro-batch; its loss metrics. ``first``: the step's
        first pass, whose log-probabilities are the old policy's (on-policy; stored into ``old``
        for the later passes). ``measure``: also add its sampler-versus-learner logprob gap to
        `mismatch` (first pass only, before any update). ``pad``: a padding pass (`_even`): its
        loss counts zero and it reports nothing."""
        cfg, preset = self.cfg, self.preset
        sub = plan.batch.select(part)
        width = sub.loss_mask.shape[1]
        logp, entropy = completion_logps(
            self.policy.model, sub, cfg.temperature, entropy_grad=preset.entropy_coef != 0,
            chunk_tokens=cfg.logprob_chunk_tokens, share_prompts=self.policy.share_prompts(),
        )
        if first and old is not None and not pad:
            old[part, :width] = logp.detach()
        loss, m = compute_loss(
            preset,
            logp=logp,
            old_logp=None if old is None or first else old[part, :width],
            ref_logp=None if ref is None else ref[part, :width],
            sampler_logp=sub.sampler_logp if preset.off_policy is not None else None,
            advantages=sub.advantages,
            loss_mask=sub.loss_mask,
            is_expert=sub.is_expert if self.with_expert else None,
            entropy=entropy,
            normalizer=plan.normalizer,
            sequence_tokens=sub.sequence_tokens,
        )
        if pad:
            self.policy.backward(loss * 0.0, last=last)
            return {}
        self.policy.backward(loss, last=last)
        if measure:
            rl_mask = sub.loss_mask.to(torch.bool) & ~sub.is_expert.unsqueeze(-1)
            self.mismatch.add(logp, sub.sampler_logp[:, : logp.shape[1]], rl_mask)
        return m

    def metrics(self, plan: StepPlan, sums: dict[str, float], grad_norms: list[float]) -> dict[str, float]:
        """The step's learner metrics on this rank (loss terms, gradient norm, rate, skipped rows)."""
        sums["grad_norm"] = sum(grad_norms) / len(grad_norms)
        if plan.skipped:
            # compute_loss divided the entropy by every RL token of the step; report the mean over those trained
            entropy = sums.pop("entropy", None)
            if entropy is not None and plan.rl_tokens:
                sums["entropy"] = entropy * plan.normalizer.num_active_tokens / plan.rl_tokens
        if plan.idle:  # every row had advantage 0: the loss is exactly 0 (and no entropy was measured)
            sums["loss"] = 0.0
        sums["rows_skipped"] = float(plan.skipped)
        sums["learning_rate"] = float(self.policy.scheduler.get_last_lr()[0])
        return sums

    def global_metrics(self, metrics: dict[str, float]) -> dict[str, float]:
        """The learner's metrics over every rank: loss and the token metrics are each rank's
        contributions to the global value (global normaliser), so they add up; the gradient norm
        (taken after the all-reduce) and the learning rate are the same on every rank."""
        same = {k: metrics[k] for k in ("grad_norm", "learning_rate") if k in metrics}
        summed = self.dist.sum_values({k: v for k, v in metrics.items() if k not in same})
        mismatch = self.mismatch
        if self.dist.active:
            mismatch = MismatchStats.combine(MismatchStats(**p) for p in self.dist.gather(self.mismatch.model_dump()))
        return {**summed, **same, **mismatch.metrics()}
