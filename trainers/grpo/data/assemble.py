"""Rollout groups → one step's `TrainBatch`: token rows, expert rows, advantages, rollout metrics.

Advantages and metrics are computed over the global batch (every rank's rows), so a run in
several processes logs and normalises what one process would.

A rollout whose model calls are not one growing history gives several rows. Groups are of
rollouts, not rows: the advantage is computed once per rollout (a rollout of five rows does
not count five times in its group's mean and std) and copied to its rows; the rollout metrics
count rollouts, with ``rollouts/rows_per_rollout`` and ``rollouts/prefix_breaks`` saying how
often histories were split.
"""

from __future__ import annotations

import random
from typing import Any

import torch

from trainers.grpo.algo.advantages import GroupStats, get_advantage_fn, group_stats
from trainers.grpo.algo.algorithms import AlgorithmPreset
from trainers.grpo.algo.losses import expert_count
from trainers.grpo.data.batch import TrainBatch, TrainRow, collate, rows_from_sequences
from trainers.grpo.dist.ranks import Dist
from verifiers.errors import ConfigError, ServerError
from verifiers.types import RolloutResult, prefix_breaks


def no_rows_reason(results: list[RolloutResult], step: int, max_seq_len: int) -> str:
    """Why no rollout of a step gave a training row, naming the real cause.

    "The server must return token ids" is said only when rollouts that did not fail came back
    without them; rollouts that all failed before the model answered (an environment that raises,
    a prompt over the context) and rows longer than ``max_seq_len`` each get their own message.
    """
    failed = [r for r in results if not r.tokens and r.error is not None]
    overlong = [r for r in results if not r.tokens and r.error is None and r.stop_reason == "prompt_too_long"]
    if overlong and len(overlong) + len(failed) == len(results):
        return (f"every rollout of step {step + 1} stopped before the model answered because the prompt did not fit "
                "the server's context (stop reason prompt_too_long): lower max_tokens (the server counts prompt + "
                "max_tokens against its context length), shorten the prompts, or serve a longer context")
    if any(not r.tokens and r.error is None and r.stop_reason != "prompt_too_long" for r in results):
        errors = sorted({r.error.type for r in failed if r.error})
        return ("no rollout in this batch has token data to train on"
                + (f" (errors: {', '.join(errors)})" if errors else "")
                + "; the server must return token ids (return_token_ids) and logprobs")
    if failed and len(failed) == len(results):
        kinds = sorted({r.error.type for r in failed if r.error})
        first = next(r.error for r in failed if r.error is not None)
        return (f"every rollout of step {step + 1} ended with an error before the model answered "
                f"({', '.join(kinds)}): the first said {first.where}: {first.message[:300]}")
    seqs = [s for r in results for s in r.token_rows() if any(s.completion_mask)]
    lengths = [len(s.prompt_ids) + len(s.completion_ids) for s in seqs]
    if lengths and min(lengths) > max_seq_len:
        return (f"every rollout of step {step + 1} is longer than max_seq_len = {max_seq_len} tokens (the shortest "
                f"token row has {min(lengths)}): raise max_seq_len, or lower max_tokens / shorten the prompts")
    return (f"no rollout of step {step + 1} gave a training row: the model sampled no tokens (empty completions)"
            + (f", or every token row is longer than max_seq_len = {max_seq_len} with overlong = 'drop'"
               if lengths else ""))


SERVER_ERRORS = {"ServerError", "ModelTimeoutError", "RolloutTimeoutError", "EmptyResponseError"}
"""Rollout errors that mean the inference server is gone or stuck, not that the environment is wrong."""


def markup_token_ids(tokenizer: Any) -> frozenset[int]:
    """The tokenizer's markup tokens: added, not special, more than one character (``<tool_call>``).

    They are text a user does not read (``vf.reply_text`` drops them), so a policy that samples
    more of them is not saying more; ``completions/markup_share`` follows them.
    """
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    return frozenset(int(i) for i, tok in added.items()
                     if not getattr(tok, "special", True) and len(getattr(tok, "content", str(tok))) > 1)


class BatchAssembler:
    """Builds the step's batch from whole groups (plus the ``mix`` preset's expert rows)."""

    def __init__(self, cfg: Any, preset: AlgorithmPreset, dist: Dist, pad_id: int, expert: list[TrainRow],
                 markup_ids: frozenset[int] = frozenset()) -> None:
        self.cfg = cfg
        self.preset = preset
        self.dist = dist
        self.pad_id = pad_id
        self.expert = expert
        self.markup_ids = markup_ids

    def build(self, groups: list[list[RolloutResult]], step: int, device: Any) -> tuple[TrainBatch, dict[str, float]]:
        """The batch for step ``step + 1`` on ``device``, with its advantages, and the rollout metrics."""
        rows, breaks = self._rows(groups, step)
        all_results = [r for rs in groups for r in rs]
        num_rollouts = len({row.rollout for row in rows})
        if self.expert:
            rows += self._expert_rows(num_rollouts, step)
        batch = collate(rows, self.pad_id).to(device)
        rl = ~batch.is_expert
        adv = torch.zeros(len(batch), device=batch.rewards.device)
        adv[rl], stats = self.rollout_advantages(rows, batch)
        batch.advantages = adv
        return batch, self.metrics(all_results, rows, batch, stats, breaks)

    def _rows(self, groups: list[list[RolloutResult]], step: int) -> tuple[list[TrainRow], int]:
        """The token rows of the rollouts (each keyed by its rollout's running index) and the number
        of prefix breaks among them; an error naming the cause when no rollout gives a row."""
        cfg = self.cfg
        rows: list[TrainRow] = []
        breaks = rollouts = 0
        for g, rs in enumerate(groups):
            for r in rs:
                seqs = r.token_rows()
                got = rows_from_sequences(seqs, r, g, cfg.max_seq_len, cfg.overlong, rollout=rollouts)
                if got:
                    rollouts += 1
                    breaks += prefix_breaks(seqs)
                    rows.extend(got)
        if rows:
            return rows, breaks
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

    def rollout_advantages(self, rows: list[TrainRow], batch: TrainBatch) -> tuple[torch.Tensor, GroupStats]:
        """The RL rows' advantages, in the order of the RL rows in ``rows``: computed once per rollout
        (groups are of rollouts, not rows; a rollout of five rows must not count five times in its
        group's mean and std), then copied to each of its rows. ``batch`` gives the device."""
        position: dict[int, int] = {}  # rollout key -> its place among the rollouts
        firsts: list[TrainRow] = []  # each rollout's first row
        owner: list[int] = []  # each RL row's rollout
        for i, row in enumerate(r for r in rows if not r.is_expert):
            key = row.rollout if row.rollout >= 0 else -1 - i
            if key not in position:
                position[key] = len(firsts)
                firsts.append(row)
            owner.append(position[key])
        device = batch.rewards.device
        rewards = torch.tensor([row.reward for row in firsts], dtype=torch.float32).to(device)
        groups = torch.tensor([row.group for row in firsts], dtype=torch.long).to(device)
        per_rollout, stats = self.advantages(rewards, groups)
        return per_rollout.index_select(0, torch.tensor(owner, dtype=torch.long).to(device)), stats

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
                stats: GroupStats, breaks: int = 0) -> dict[str, float]:
        """The step's rollout metrics over the global batch (sums and counts added over ranks).

        Lengths and the clipped ratio are per trained rollout (a rollout of several rows: its
        rows' trained tokens together; clipped when one of its rows is). ``rollouts/trained``
        counts rollouts, ``rollouts/timeouts`` those cut by a wall-clock limit (an agent program's
        ``timeout_s``: under a slow server that is the server's latency, not the policy's doing), ``rollouts/rows_per_rollout`` their mean number of rows,
        ``completions/markup_share`` is the share of trained completion tokens that are markup (the
        tokenizer's added, non-special multi-character tokens: ``<tool_call>``, ``<think>``), which
        rewards read through ``vf.reply_text`` ignore; ``rollouts/prefix_breaks`` the model calls that did not extend an earlier call and
        ``rollouts/token_in_share`` (only with agent programs' follow-up calls) the share of those
        follow-ups that continued the earlier call's exact ids.
        """
        del batch  # the rows say it all (kept in the signature for callers)
        lengths: dict[int, int] = {}
        clipped: dict[int, bool] = {}
        markup = 0
        for i, row in enumerate(r for r in rows if not r.is_expert):
            key = row.rollout if row.rollout >= 0 else -1 - i
            lengths[key] = lengths.get(key, 0) + sum(row.loss_mask)
            clipped[key] = clipped.get(key, False) or row.is_truncated
            if self.markup_ids:
                markup += sum(1 for t, m in zip(row.input_ids[1:], row.loss_mask, strict=False)
                              if m and t in self.markup_ids)
        local = {
            "reward": sum(r.reward for r in results), "n/results": len(results),
            "lengths": sum(lengths.values()), "n/lengths": len(lengths),
            "clipped": float(sum(clipped.values())), "n/rl": float(len(lengths)), "markup": float(markup),
            "rows": float(sum(1 for r in rows if not r.is_expert)), "prefix_breaks": float(breaks),
            "errors": sum(1 for r in results if r.error),
            "timeouts": sum(1 for r in results if r.stop_reason == "timeout"),
            "scoring_errors": sum(1 for r in results if r.scoring_errors),
            "follow_ups": float(sum(1 for r in results for t in r.tokens if t.follow_up)),
            "token_in": float(sum(1 for r in results for t in r.tokens if t.follow_up and t.token_in)),
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
            "completions/max_length": self.dist.max_values({"m": float(max(lengths.values()))})["m"],
            "completions/clipped_ratio": tot["clipped"] / tot["n/rl"],
            "rollouts/errors": tot["errors"],
            "rollouts/scoring_errors": tot["scoring_errors"],
            "rollouts/timeouts": tot["timeouts"],
            "rollouts/trained": tot["n/rl"],
            "rollouts/rows_per_rollout": tot["rows"] / tot["n/rl"],
            "rollouts/prefix_breaks": tot["prefix_breaks"],
        }
        if self.markup_ids:  # a policy drifting onto markup tokens (issue 47: the `<tool_call>` hack) shows here
            metrics["completions/markup_share"] = tot["markup"] / max(tot["lengths"], 1)
        if tot["follow_ups"]:  # agent programs' calls that extended an earlier call: how many went token-in
            metrics["rollouts/token_in_share"] = tot["token_in"] / tot["follow_ups"]
        for k in sorted(tot):
            if k.startswith("rewards/"):
                metrics[k] = tot[k] / tot[f"n/{k}"]
        return metrics
