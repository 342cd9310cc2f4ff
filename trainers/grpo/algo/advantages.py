"""Group-relative advantages: one small pure function per estimator, looked up by name.

Every estimator takes the scalar rewards of a batch and an explicit ``group_ids`` tensor
(one int64 per row; rows with the same id were sampled from the same prompt). Groups are
never inferred from row order or from a dataset index, because the same prompt can appear
twice in one step and must then form two groups.

Two conventions differ from verl on purpose and hold for every estimator:

* a group of one row gets advantage exactly 0 (verl uses mean 0 / std 1, so A = R, which
  pushes on a sample with no baseline at all);
* a group whose rewards are all equal gets advantage exactly 0, not a float residue such as
  1e-17 from ``R - mean``; such rows carry no learning signal and are counted by
  :func:`group_stats` as ``frac_reward_zero_std``.

All arithmetic runs in float64 and the result is cast back to the rewards' dtype, so the
ANCHORS test vectors hold to many digits regardless of the input precision.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import torch
from torch import Tensor

from verifiers.errors import ConfigError

SCALES = ("group", "batch", "none")


class AdvantageFn(Protocol):
    def __call__(
        self, rewards: Tensor, group_ids: Tensor, *, scale: str = ..., eps: float = ...
    ) -> Tensor: ...


class _Groups(NamedTuple):
    """Per-row views of group statistics (all float64, shape [B])."""

    index: Tensor  # dense group index per row, 0..num_groups-1
    size: Tensor  # number of rows in the row's group
    total: Tensor  # sum of rewards in the row's group
    mean: Tensor
    std: Tensor  # unbiased; 0 for singletons
    no_signal: Tensor  # bool: singleton or all rewards equal


def _check(rewards: Tensor, group_ids: Tensor) -> None:
    if rewards.dim() != 1:
        raise ConfigError(f"rewards must be 1-D [batch], got shape {tuple(rewards.shape)}")
    if group_ids.shape != rewards.shape:
        raise ConfigError(
            f"group_ids must have the same shape as rewards ({tuple(rewards.shape)}), "
            f"got {tuple(group_ids.shape)}; pass one group id per row"
        )
    if group_ids.dtype.is_floating_point or group_ids.dtype == torch.bool:
        raise ConfigError(f"group_ids must be an integer tensor (int64), got {group_ids.dtype}")


def _groups(rewards: Tensor, group_ids: Tensor) -> _Groups:
    r = rewards.detach().to(torch.float64)
    _, index = torch.unique(group_ids, return_inverse=True)
    n_groups = int(index.max().item()) + 1 if index.numel() else 0
    size = torch.zeros(n_groups, dtype=torch.float64, device=r.device).index_add_(
        0, index, torch.ones_like(r)
    )
    total = torch.zeros(n_groups, dtype=torch.float64, device=r.device).index_add_(0, index, r)
    mean = total / size
    sq = torch.zeros(n_groups, dtype=torch.float64, device=r.device).index_add_(
        0, index, (r - mean[index]) ** 2
    )
    std = torch.where(size > 1, torch.sqrt(sq / (size - 1).clamp(min=1)), torch.zeros_like(sq))
    # Equality is decided exactly (max == min), not from a float std that may be 1e-17.
    big = torch.full((n_groups,), -torch.inf, dtype=torch.float64, device=r.device)
    small = torch.full((n_groups,), torch.inf, dtype=torch.float64, device=r.device)
    gmax = big.scatter_reduce(0, index, r, reduce="amax")
    gmin = small.scatter_reduce(0, index, r, reduce="amin")
    no_signal = (size < 2) | (gmax == gmin)
    return _Groups(index, size[index], total[index], mean[index], std[index], no_signal[index])


def _scale(adv: Tensor, groups: _Groups, rewards: Tensor, scale: str, eps: float) -> Tensor:
    if scale == "none":
        return adv
    if scale == "group":
        return adv / (groups.std + eps)
    if scale == "batch":
        r = rewards.detach().to(torch.float64)
        std = r.std(unbiased=True) if r.numel() > 1 else torch.zeros((), dtype=torch.float64)
        return adv / (std + eps)
    raise ConfigError(f"unknown advantage scale {scale!r}; use one of {', '.join(SCALES)}")


def _finish(adv: Tensor, groups: _Groups, rewards: Tensor) -> Tensor:
    adv = torch.where(groups.no_signal, torch.zeros_like(adv), adv)
    out_dtype = rewards.dtype if rewards.dtype.is_floating_point else torch.float32
    return adv.to(out_dtype)


def grpo_advantages(rewards: Tensor, group_ids: Tensor, *, scale: str = "group", eps: float = 1e-4) -> Tensor:
    """A = R - mean(group), divided by (std + eps) of the group, of the batch, or not at all.

    ``scale="group"`` is the GRPO paper; ``"batch"`` divides by the std of all rewards in
    the batch (more robust when groups are small, as in TRL's ``scale_rewards="batch"``);
    ``"none"`` is Dr. GRPO, which argues that per-group std scaling over-weights easy and
    hard prompts. ``eps`` keeps the division finite (TRL 1e-4, verl 1e-6).
    """
    _check(rewards, group_ids)
    g = _groups(rewards, group_ids)
    adv = rewards.detach().to(torch.float64) - g.mean
    return _finish(_scale(adv, g, rewards, scale, eps), g, rewards)


def dr_grpo_advantages(
    rewards: Tensor, group_ids: Tensor, *, scale: str = "none", eps: float = 1e-4
) -> Tensor:
    """Dr. GRPO: A = R - mean(group), never divided by a std (the paper's fix for its bias).

    ``scale`` exists only so every estimator shares one signature; anything but ``"none"``
    contradicts the method and is rejected rather than silently ignored.
    """
    if scale != "none":
        raise ConfigError(f"dr_grpo advantages use no std scaling; got scale={scale!r}, set scale='none'")
    return grpo_advantages(rewards, group_ids, scale="none", eps=eps)


def rloo_advantages(rewards: Tensor, group_ids: Tensor, *, scale: str = "none", eps: float = 1e-4) -> Tensor:
    """RLOO: A_i = R_i - mean of the other rows of the group (leave-one-out baseline).

    The baseline does not depend on the sample itself, so the estimator stays unbiased; it
    equals n/(n-1) * (R_i - mean). Optional std scaling as for :func:`grpo_advantages`.
    """
    _check(rewards, group_ids)
    g = _groups(rewards, group_ids)
    r = rewards.detach().to(torch.float64)
    others = (g.total - r) / (g.size - 1).clamp(min=1)
    adv = r - others
    return _finish(_scale(adv, g, rewards, scale, eps), g, rewards)


ADVANTAGES: dict[str, AdvantageFn] = {
    "grpo": grpo_advantages,
    "dr_grpo": dr_grpo_advantages,
    "rloo": rloo_advantages,
}


class GroupStats(NamedTuple):
    """Metrics about the reward groups of a batch.

    ``zero_std_mask`` [B] bool marks rows in groups that carry no signal (all rewards equal,
    or a group of one); ``frac_reward_zero_std`` is its mean (0-d tensor, TRL's metric name);
    ``reward_std`` is the mean over rows of their group's unbiased std (0 for singletons).
    """

    zero_std_mask: Tensor
    frac_reward_zero_std: Tensor
    reward_std: Tensor


def group_stats(rewards: Tensor, group_ids: Tensor) -> GroupStats:
    """Per-row "no signal" mask plus the two group metrics users look for when loss is 0.

    A step whose groups all have equal rewards produces zero advantages and therefore a
    zero policy loss; ``frac_reward_zero_std`` near 1 is the usual explanation.
    """
    _check(rewards, group_ids)
    g = _groups(rewards, group_ids)
    if rewards.numel() == 0:
        zero = torch.zeros((), dtype=torch.float32)
        return GroupStats(g.no_signal, zero, zero)
    return GroupStats(
        zero_std_mask=g.no_signal,
        frac_reward_zero_std=g.no_signal.to(torch.float32).mean(),
        reward_std=g.std.mean().to(torch.float32),
    )


def get_advantage_fn(name: str) -> AdvantageFn:
    """Look up an estimator by name with an error that lists the valid ones."""
    try:
        return ADVANTAGES[name]
    except KeyError:
        raise ConfigError(
            f"unknown advantage estimator {name!r}; valid names: {', '.join(sorted(ADVANTAGES))}"
        ) from None
