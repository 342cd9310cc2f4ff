"""Micro-batches of one optimizer step by a token budget, rows of similar length together.

Splitting a step's rows into a fixed number of equal micro-batches (``gradient_accumulation_steps``)
ties memory to the longest rows that happen to land together: one long completion pads every
row of its micro-batch to its length, and a step of long rollouts needs as many rows' worth of
memory as one of short ones. Here a micro-batch holds at most ``max_tokens`` padded tokens
(rows x its longest row, what the learner actually runs), and rows are packed longest first so
rows of similar length share a micro-batch and padding stays small.

A prompt group (the ``G`` samples of one prompt) stays in one micro-batch whenever it fits, so
the shared-prompt logprob path runs its prompt once; a group that does not fit is split into
pieces that do. A single row longer than the budget gets a micro-batch of its own (a row cannot
be split). The gradient does not depend on the split: every micro-batch's loss is its share of
the full-step loss (`trainers.grpo.algo.losses.LossNormalizer`), so only memory and speed change.

Ties (units of equal length) are broken by a seeded shuffle, so a plan is reproducible from
``(seed, step, iteration)`` like the permutation it replaces.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from trainers.grpo.data.batch import TrainBatch


def _units(groups: Sequence[int]) -> list[list[int]]:
    """Rows by prompt group, in order of first appearance; rows without a group (< 0, e.g. expert rows) alone."""
    by_group: dict[int, list[int]] = {}
    units: list[list[int]] = []
    for i, g in enumerate(groups):
        if g < 0:
            units.append([i])
        elif g in by_group:
            by_group[g].append(i)
        else:
            by_group[g] = [i]
            units.append(by_group[g])
    return units


def _fit(rows: list[int], lengths: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Split one unit's rows (longest first) into pieces of at most ``max_tokens`` padded tokens."""
    pieces: list[list[int]] = []
    for i in sorted(rows, key=lambda r: -lengths[r]):
        if pieces and (len(pieces[-1]) + 1) * lengths[pieces[-1][0]] <= max_tokens:
            pieces[-1].append(i)
        else:
            pieces.append([i])
    return pieces


def plan_micro_batches(
    lengths: Sequence[int],
    groups: Sequence[int],
    max_tokens: int,
    generator: torch.Generator | None = None,
) -> list[list[int]]:
    """Row indices of each micro-batch: each at most ``max_tokens`` padded tokens (rows x longest row).

    Units (whole prompt groups, or the budget-sized pieces of a group too big for one) are
    taken longest first and appended to the current micro-batch while it stays within budget,
    so each micro-batch's width is that of its first unit. Every row appears exactly once.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    if len(lengths) != len(groups):
        raise ValueError(f"lengths ({len(lengths)}) and groups ({len(groups)}) must have one entry per row")
    units = [piece for unit in _units(groups) for piece in _fit(unit, lengths, max_tokens)]
    if generator is not None:
        order = torch.randperm(len(units), generator=generator).tolist()
        units = [units[k] for k in order]
    units.sort(key=lambda u: -lengths[u[0]])  # stable: equal lengths keep the shuffled order
    plan: list[list[int]] = []
    width = 0
    for unit in units:
        if plan and (len(plan[-1]) + len(unit)) * width <= max_tokens:
            plan[-1].extend(unit)
        else:
            plan.append(list(unit))
            width = lengths[unit[0]]
    return plan


def micro_batches(batch: TrainBatch, max_tokens: int, generator: torch.Generator | None = None) -> list[Tensor]:
    """`plan_micro_batches` for a batch, as CPU index tensors (move them to the batch's device to use)."""
    lengths = batch.attention_mask.sum(1).clamp(min=2).tolist()
    plan = plan_micro_batches(lengths, batch.group_ids.tolist(), max_tokens, generator)
    return [torch.tensor(rows, dtype=torch.long) for rows in plan]


def padded_tokens(lengths: Sequence[int], rows: Sequence[int]) -> int:
    """Tokens a micro-batch of ``rows`` costs: rows x its longest row."""
    return len(rows) * max(lengths[r] for r in rows) if rows else 0


__all__ = ["micro_batches", "padded_tokens", "plan_micro_batches"]
