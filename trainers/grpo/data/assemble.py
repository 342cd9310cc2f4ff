"""Rollout groups → one step's `TrainBatch`: token rows, expert rows, advantages, rollout metrics.

Advantages and metrics are computed over the global batch (every rank's rows), so a run in
several processes logs and normalises what one process would.
"""

from __future__ import annotations

import random
from typing import Any

import torch

from trainers.grpo.algo.advantages import GroupStats, get_advantage_fn, group_stats
from trainers.grpo.algo.algorithms import AlgorithmPreset
from trainers.grpo.algo.losses import expert_count
from trainers.grpo.data.batch import TrainBatch, TrainRow, collate, row_from_result
from trainers.grpo.dist.ranks import Dist
from verifiers.errors import ConfigError, ServerError
from verifiers.types import RolloutResult


def no_rows_reason(results: list[RolloutResult], step: int, max_seq_len: int) -> str:
    """Why no rollout of a step gave a training row, naming the real cause.

    "The server must return token ids" is said only when rollouts that did not fail came back
    without them; rollouts that all failed before the model answered (an environment that raises,
    a prompt over the context) and rows longer than ``max_seq_len`` each get their own message.
    """
    failed = [r for r in results if not r.tokens and r.error is not None]
    if any(not r.tokens and r.error is None for r in results):
        errors = sorted({r.error.type for r in failed if r.error})
        return ("no rollout in this batch has token data to train on"
                + (f" (errors: {', '.join(errors)})" if errors else "")
                + "; the server must return token ids (return_token_ids) and logprobs")
    if failed and len(failed) == len(results):
        kinds = sorted({r.error.type for r in failed if r.error})
        first = next(r.error for r in failed if r.error is not None)
        return (f"every rollout of step {step + 1} ended with an error before the model answered "
                f"({', '.join(kinds)}): the first said {first.where}: {first.message[:300]}")
    seqs = [r.token_sequence() for r in results if r.tokens]
    lengths = [len(s.prompt_ids) + len(s.completion_ids) for s in seqs]
    if lengths and min(lengths) > max_seq_len:
        return (f"every rollout of step {step + 1} is longer than max_seq_len = {max_seq_len} tokens (the shortest "
                f"has {min(lengths)}): raise max_seq_len, or lower max_tokens / shorten the prompts")
    return (f"no rollout of step {step + 1} gave a training row: multi-turn histories that are not one growing "
            "prefix of token ids, or empty completions")


SERVER_ERRORS = {"ServerError", "ModelTimeoutError", "RolloutTimeoutError", "EmptyResponseError"}
"""Rollout errors that mean the inference server is gone or stuck, not that the environment is wrong."""


class BatchAssembler:
    """Builds the step's batch from whole groups (plus the ``mix`` preset's expert rows)."""

    def __init__(self, cfg: Any, preset: AlgorithmPreset, dist: Dist, pad_id: int, expert: list[TrainRow]) -> None:
        self.cfg = cfg
        self.preset = preset
        self.dist = dist
        self.pad_id = pad_id
        self.expert = expert

    def build(self, groups: list[list[RolloutResult]], step: int, device: Any) -> tuple[TrainBatch, dict[str, float]]:
        """The batch for step ``step + 1`` on ``device``, with its advantages, and the rollout metrics."""
        rows = self._rows(groups, step)
        all_results = [r for rs in groups for r in rs]
        if self.expert:
            rows += self._expert_rows(len(rows), step)
        batch = collate(rows, self.pad_id).to(device)
        rl = ~batch.is_expert
        adv = torch.zeros(len(batch), device=batch.rewards.device)
        adv[rl], stats = self.advantages(batch.rewards[rl], batch.group_ids[rl])
        batch.advantages = adv
        return batch, self.metrics(all_results, rows, batch, stats)

    def _rows(self, groups: list[list[RolloutResult]], step: int) -> list[TrainRow]:
        """The token rows of the rollouts; an error naming the cause when none has token data."""
        cfg = self.cfg
        rows: list[TrainRow] = []
        for g, rs in enumerate(groups):
            for r in rs:
                row = row_from_result(r, g, cfg.max_seq_len, cfg.overlong)
                if row is not None:
                    rows.append(row)
        if rows:
            return rows
        all_results = [r for rs in groups for r in rs]
        errors = sorted({r.error.type for r in all_results if r.error})
        if errors and all(r.error is not None for r in all_results) and set(errors) <= SERVER_ERRORS:
            first = next(r.error for r in all_results if r.error is not None)
            raise ServerError(f"every rollout of step {step + 1} failed ({', '.join(errors)}): {first.message}")
        raise ConfigError(no_rows_reason(all_results, step, cfg.max_seq_len))

    def _expert_rows(self, num_rl: int, step: int) -> list[TrainRow]:
        """The ``mix`` preset's expert rows: a share of the whole batch, drawn with a per-step seed."""
        assert self.preset.mix is not None
        # The expert share is of the whole batch (ANCHORS: 0.25 of 256 = 64 expert + 192 usual).
        ratio = self.preset.mix.expert_ratio
        k = expert_count(ratio, round(num_rl / (1.0 - ratio)))
        # rank 0 draws what one process would; other ranks draw other expert rows
        rng = random.Random(self.cfg.seed * 7919 + step + 1_000_003 * self.dist.rank)
        return [self.expert[rng.randrange(len(self.expert))] for _ in range(k)]

    def advantages(self, rewards: torch.Tensor, group_ids: torch.Tensor) -> tuple[torch.Tensor, GroupStats]:
        """This rank's advantages and the group metrics, computed over every rank's rows.

        Groups are whole on each rank, but a batch-level scale (``scale = "batch"``) and the
        metrics need the global batch: with it, they equal what one process computes.
        """
        all_rewards, all_groups, offset = self.dist.gather_groups(rewards, group_ids)
        adv_fn = get_advantage_fn(self.preset.advantage)
        adv = adv_fn(all_rewards, all_groups, scale=self.preset.scale, eps=self.preset.eps)
        return adv[offset : offset + len(rewards)], group_stats(all_rewards, all_groups)

    def metrics(self, results: list[RolloutResult], rows: list[TrainRow], batch: TrainBatch,
                stats: GroupStats) -> dict[str, float]:
        """The step's rollout metrics over the global batch (sums and counts added over ranks)."""
        rl = ~batch.is_expert
        lengths = [sum(r.loss_mask) for r in rows if not r.is_expert]
        local = {
            "reward": sum(r.reward for r in results), "n/results": len(results),
            "lengths": sum(lengths), "n/lengths": len(lengths),
            "clipped": float(batch.is_truncated[rl].sum()), "n/rl": float(rl.sum()),
            "errors": sum(1 for r in results if r.error),
            "scoring_errors": sum(1 for r in results if r.scoring_errors),
        }
        for r in results:
            for k, v in r.metrics.items():
                local[f"rewards/{k}"] = local.get(f"rewards/{k}", 0.0) + v
                local[f"n/rewards/{k}"] = local.get(f"n/rewards/{k}", 0) + 1
        tot = self.dist.sum_values(local)
        metrics: dict[str, float] = {
            "reward": tot["reward"] / tot["n/results"],
            "reward_std": float(stats.reward_std),
            "frac_reward_zero_std": float(stats.frac_reward_zero_std),
            "completions/mean_length": tot["lengths"] / tot["n/lengths"],
            "completions/max_length": self.dist.max_values({"m": float(max(lengths))})["m"],
            "completions/clipped_ratio": tot["clipped"] / tot["n/rl"],
            "rollouts/errors": tot["errors"],
            "rollouts/scoring_errors": tot["scoring_errors"],
            "rollouts/trained": tot["n/rl"],
        }
        for k in sorted(tot):
            if k.startswith("rewards/"):
                metrics[k] = tot[k] / tot[f"n/{k}"]
        return metrics
