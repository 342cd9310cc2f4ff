"""Per-token policy losses, their aggregation to a scalar, and the small helpers around them.

The shape of the code follows the observation in DESIGN.md: most "GRPO variants" differ in
(a) the per-token surrogate and (b) how per-token losses are averaged. Each is one pure
function in a table (:data:`POLICY_LOSSES`, :data:`AGGREGATIONS`); algorithms.py combines
them by name.

Conventions shared by every function here:

* tensors are ``[B, T]`` over completion tokens; ``mask`` is 1 on tokens that are trained
  (assistant tokens of the completion) and 0 on padding, prompt, tool and environment tokens;
* ``advantages`` is ``[B]`` (one per sequence, broadcast over tokens) or ``[B, T]``;
* ``old_logp`` and ``sampler_logp`` are constants (detached here), ``logp`` carries the graph;
* per-token losses may hold any finite value on masked positions: aggregation selects with
  ``torch.where`` so those positions contribute neither loss nor gradient.

Loss scale and gradient accumulation. Aggregations divide by counts taken once over the whole
optimizer-step batch (:class:`LossNormalizer`), never by counts of the micro-batch at hand.
Every aggregation is then a plain sum over rows, so the losses of any split into micro-batches
add up to exactly the full-batch loss and the accumulated gradient does not depend on the
split (a complaint about TRL's early per-micro-batch means, see ANCHORS §6).

Rollouts of several rows. An agent's rollout whose model calls are not one growing history
is trained as several rows (`trainers.grpo.data.batch.rows_from_result`). The unit of the
sequence-level mean is the rollout, not the row: :class:`LossNormalizer` counts rollouts
(``rollout_ids``), and ``aggregate_grpo`` divides each row's token sum by its rollout's
trained tokens (``sequence_tokens``, :func:`rollout_token_counts`), so a rollout split into
five rows weighs what the same tokens in one row would. Token-level aggregations (bnpo,
dr_grpo) sum tokens, which a split does not multiply; dr_grpo's divisor counts rollouts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal, Protocol, TypeVar

import torch
from pydantic import BaseModel, ConfigDict, NonNegativeInt, PositiveInt
from torch import Tensor

from verifiers.errors import ConfigError

_T = TypeVar("_T")

LOG_RATIO_CLAMP = 20.0  # verl clamps log-ratios before exp so one wild token cannot give inf


# ----------------------------------------------------------------------------- normaliser
class LossNormalizer(BaseModel):
    """Counts over the whole optimizer-step batch, computed once, shared by all micro-batches.

    ``num_sequences`` counts the RL rollouts (not expert rows) with at least one trained token
    (a rollout of several rows counts once; without ``rollout_ids`` every row is a rollout);
    ``num_active_tokens`` counts every trained RL token; ``num_expert_*`` count the expert (SFT) rows of a MIX
    batch. ``max_completion_len`` is the Dr. GRPO constant, normally the configured
    ``max_tokens`` (so it does not change with how long this batch's completions were).

    Data-parallel training: build one per rank with :meth:`from_batch`, gather them, and use
    :meth:`combine` so every rank divides by the global counts; since DDP averages gradients
    over ranks, multiply each rank's loss by the world size (or sum-reduce instead).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    num_sequences: NonNegativeInt
    num_active_tokens: NonNegativeInt
    max_completion_len: PositiveInt = 1
    num_expert_sequences: NonNegativeInt = 0
    num_expert_tokens: NonNegativeInt = 0

    @classmethod
    def from_batch(
        cls,
        loss_mask: Tensor,
        *,
        is_expert: Tensor | None = None,
        max_completion_len: int | None = None,
        rollout_ids: Tensor | None = None,
    ) -> LossNormalizer:
        """Counts from the full batch's ``[N, T]`` loss mask (after truncation masking);
        ``rollout_ids`` ``[N]`` marks the rows of one rollout (None: each row is one)."""
        if loss_mask.dim() != 2:
            raise ConfigError(f"loss_mask must be [batch, tokens], got shape {tuple(loss_mask.shape)}")
        m = loss_mask.to(torch.bool)
        expert = expert_rows(is_expert, m.shape[0], m.device)
        per_row = m.sum(-1)
        has_tokens = per_row > 0
        rl_rows = has_tokens & ~expert
        if rollout_ids is None:
            num_sequences = int(rl_rows.sum())
        else:
            _check_rollout_ids(rollout_ids, m.shape[0])
            num_sequences = int(torch.unique(rollout_ids[rl_rows]).numel())
        return cls(
            num_sequences=num_sequences,
            num_active_tokens=int(per_row[~expert].sum()),
            max_completion_len=max_completion_len if max_completion_len is not None else max(m.shape[1], 1),
            num_expert_sequences=int((has_tokens & expert).sum()),
            num_expert_tokens=int(per_row[expert].sum()),
        )

    @classmethod
    def combine(cls, parts: Sequence[LossNormalizer]) -> LossNormalizer:
        """Merge per-rank (or per-micro-batch) counts: sums, and the max of ``max_completion_len``."""
        if not parts:
            raise ConfigError("LossNormalizer.combine needs at least one part")
        return cls(
            num_sequences=sum(p.num_sequences for p in parts),
            num_active_tokens=sum(p.num_active_tokens for p in parts),
            max_completion_len=max(p.max_completion_len for p in parts),
            num_expert_sequences=sum(p.num_expert_sequences for p in parts),
            num_expert_tokens=sum(p.num_expert_tokens for p in parts),
        )

    def for_expert(self) -> LossNormalizer:
        """The normaliser of the SFT part of MIX: expert counts in the RL slots."""
        return LossNormalizer(
            num_sequences=self.num_expert_sequences,
            num_active_tokens=self.num_expert_tokens,
            max_completion_len=self.max_completion_len,
        )


def _check_rollout_ids(rollout_ids: Tensor, n: int) -> None:
    if rollout_ids.shape != (n,):
        raise ConfigError(f"rollout_ids must be [batch]={n}, got shape {tuple(rollout_ids.shape)}")


def rollout_token_counts(loss_mask: Tensor, rollout_ids: Tensor) -> Tensor:
    """``[N]``: for each row, the trained tokens of its whole rollout (all rows with its id).

    Taken over the full step batch once (like `LossNormalizer`), so a rollout whose rows land
    in different micro-batches is still divided by its whole count.
    """
    _check_rollout_ids(rollout_ids, loss_mask.shape[0])
    per_row = loss_mask.to(torch.bool).sum(-1)
    _, inverse = torch.unique(rollout_ids, return_inverse=True)
    totals = torch.zeros(loss_mask.shape[0], dtype=per_row.dtype, device=per_row.device)
    totals.index_add_(0, inverse, per_row)
    return totals[inverse]


def expert_rows(is_expert: Tensor | None, n: int, device: torch.device) -> Tensor:
    """``is_expert`` as a ``[n]`` bool tensor (all False when None), shape-checked."""
    if is_expert is None:
        return torch.zeros(n, dtype=torch.bool, device=device)
    if is_expert.shape != (n,):
        raise ConfigError(f"is_expert must be [batch]={n}, got shape {tuple(is_expert.shape)}")
    return is_expert.to(torch.bool)


# ----------------------------------------------------------------------------- aggregation
class AggregationFn(Protocol):
    """``sequence_tokens`` ``[B]`` (optional): each row's rollout's trained tokens, for aggregations
    that average per sequence (a rollout of several rows is one sequence); None: each row's own."""

    def __call__(self, per_token_loss: Tensor, mask: Tensor, normalizer: LossNormalizer,
                 sequence_tokens: Tensor | None = None) -> Tensor: ...


def masked_sum(values: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Sum of ``values`` where ``mask`` is set; masked positions contribute no gradient, even if inf/nan."""
    kept = torch.where(mask.to(torch.bool), values, torch.zeros_like(values))
    return kept.sum() if dim is None else kept.sum(dim)


def aggregate_grpo(per_token_loss: Tensor, mask: Tensor, normalizer: LossNormalizer,
                   sequence_tokens: Tensor | None = None) -> Tensor:
    """GRPO paper: mean over each sequence's tokens, then mean over sequences.

    Every sequence weighs the same whatever its length, so a token of a long completion
    counts less than one of a short completion (the length bias Dr. GRPO points out).
    Sequences without any trained token contribute 0 and are not counted (as in verl).
    The sequence is the rollout: with ``sequence_tokens`` each row's sum is divided by its
    rollout's trained tokens, so the rows of a split rollout together make one mean.
    """
    m = mask.to(torch.bool)
    counts = m.sum(-1) if sequence_tokens is None else sequence_tokens
    lengths = counts.clamp(min=1).to(per_token_loss.dtype)
    per_sequence = masked_sum(per_token_loss, m, dim=-1) / lengths
    return per_sequence.sum() / max(normalizer.num_sequences, 1)


def aggregate_bnpo(per_token_loss: Tensor, mask: Tensor, normalizer: LossNormalizer,
                   sequence_tokens: Tensor | None = None) -> Tensor:
    """BNPO / DAPO token-level mean: sum over all trained tokens / number of trained tokens.

    Every token weighs the same, so long completions are not under-weighted (and a rollout
    split into rows weighs its tokens, whatever the split: ``sequence_tokens`` is not needed).
    """
    del sequence_tokens
    return masked_sum(per_token_loss, mask) / max(normalizer.num_active_tokens, 1)


def aggregate_dr_grpo(per_token_loss: Tensor, mask: Tensor, normalizer: LossNormalizer,
                      sequence_tokens: Tensor | None = None) -> Tensor:
    """Dr. GRPO: sum over trained tokens / (number of sequences x max completion length).

    The divisor is a constant of the run, so neither completion length nor the number of
    trained tokens in the batch rescales the gradient. Sequences are rollouts (the
    normaliser's count), so splitting a rollout into rows changes nothing.
    """
    del sequence_tokens
    denom = max(normalizer.num_sequences, 1) * normalizer.max_completion_len
    return masked_sum(per_token_loss, mask) / denom


AGGREGATIONS: dict[str, AggregationFn] = {
    "grpo": aggregate_grpo,
    "bnpo": aggregate_bnpo,
    "dapo": aggregate_bnpo,
    "dr_grpo": aggregate_dr_grpo,
}


def token_mean_contribution(values: Tensor, mask: Tensor, normalizer: LossNormalizer) -> Tensor:
    """A micro-batch's share of a batch-wide token mean (detached, for metrics).

    Summing it over the micro-batches of a step gives the mean over all trained RL tokens.
    """
    return (
        masked_sum(values.detach().to(torch.float32), mask) / max(normalizer.num_active_tokens, 1)
    ).detach()


# ----------------------------------------------------------------------------- policy losses
class PolicyLossFn(Protocol):
    def __call__(
        self,
        logp: Tensor,
        old_logp: Tensor,
        advantages: Tensor,
        mask: Tensor,
        *,
        eps_low: float = ...,
        eps_high: float = ...,
        dual_clip: float | None = ...,
    ) -> tuple[Tensor, dict[str, Tensor]]: ...


def _expand(advantages: Tensor, like: Tensor) -> Tensor:
    if advantages.dim() == 1:
        if advantages.shape[0] != like.shape[0]:
            raise ConfigError(
                f"advantages [{advantages.shape[0]}] do not match the batch size {like.shape[0]} of logp"
            )
        return advantages.detach().to(like.dtype).unsqueeze(-1).expand_as(like)
    if advantages.shape != like.shape:
        raise ConfigError(
            f"advantages must be [B] or [B, T]={tuple(like.shape)}, got {tuple(advantages.shape)}"
        )
    return advantages.detach().to(like.dtype)


def _clipped_objective(
    ratio: Tensor, adv: Tensor, eps_low: float, eps_high: float, dual_clip: float | None
) -> tuple[Tensor, dict[str, Tensor]]:
    """-min(r A, clip(r, 1-eps_low, 1+eps_high) A), optionally bounded by -c A for A < 0.

    ``torch.where`` (not ``maximum``) picks one branch so the gradient is exactly the chosen
    branch's: -A dr inside the trust region, 0 where the clip is active.
    """
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
    loss = torch.where(unclipped >= clipped, unclipped, clipped)
    low = (ratio < 1.0 - eps_low) & (adv < 0)
    high = (ratio > 1.0 + eps_high) & (adv > 0)
    metrics = {"clip_low": low.float(), "clip_high": high.float(), "clip_region": (low | high).float()}
    if dual_clip is not None:
        # Dual clip (verl): for A < 0 a huge ratio would give an unbounded loss -A r; cap it at -A c.
        bound = -adv * dual_clip
        dual = (adv < 0) & (bound < loss)
        loss = torch.where(dual, bound, loss)
        metrics["clip_dual"] = dual.float()
    return loss, metrics


def _log_ratio(logp: Tensor, old_logp: Tensor) -> Tensor:
    return torch.clamp(logp - old_logp.detach(), min=-LOG_RATIO_CLAMP, max=LOG_RATIO_CLAMP)


def clipped_policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    dual_clip: float | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO / GRPO clipped surrogate per token with the token ratio r = exp(logp - old_logp).

    ``eps_high > eps_low`` is DAPO's clip-higher (0.28), which lets low-probability tokens grow
    and keeps entropy from collapsing. ``dual_clip`` (c > 1, verl uses 3) bounds the loss of
    negative-advantage tokens whose ratio exploded. At r = 1 the gradient is -A d(logp),
    i.e. REINFORCE with the group baseline.
    """
    del mask  # token-level: masking happens in aggregation
    ratio = torch.exp(_log_ratio(logp, old_logp))
    return _clipped_objective(ratio, _expand(advantages, logp), eps_low, eps_high, dual_clip)


def gspo_policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    eps_low: float = 3e-4,
    eps_high: float = 4e-4,
    dual_clip: float | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """GSPO: clip one sequence-level ratio s = exp(mean over trained tokens of log r_t).

    Written in the GSPO-token form: every token carries s's value, sg[s] * pi_t / sg[pi_t], so
    its gradient is s * d(logp_t). With advantages constant per sequence and any aggregation
    here (whose token weights are constant within a sequence) this equals the gradient of the
    paper's / TRL's ``importance_sampling_level="sequence"`` objective, and it still works when
    advantages vary per token. Clipping acts on s, so a whole sequence is kept or dropped;
    hence the tiny eps (3e-4 / 4e-4 in the paper).
    """
    m = mask.to(torch.bool)
    lengths = m.sum(-1, keepdim=True).clamp(min=1).to(logp.dtype)
    seq_log_ratio = masked_sum(logp.detach() - old_logp.detach(), m, dim=-1).unsqueeze(-1) / lengths
    seq_log_ratio = torch.clamp(seq_log_ratio, min=-LOG_RATIO_CLAMP, max=LOG_RATIO_CLAMP)
    ratio = torch.exp(seq_log_ratio + logp - logp.detach())
    return _clipped_objective(ratio, _expand(advantages, logp), eps_low, eps_high, dual_clip)


def cispo_policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    eps_low: float = 1.0,
    eps_high: float = 4.0,
    dual_clip: float | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """CISPO (MiniMax-M1): -sg[clip(r, 1-eps_low, 1+eps_high)] * A * logp.

    The ratio is clipped and detached, used only as a weight, so unlike PPO no token ever
    loses its gradient (PPO drops the rare "fork" tokens whose ratio left the trust region).
    eps_low = 1 means no lower bound, as in the paper.
    """
    del mask
    if dual_clip is not None:
        raise ConfigError("dual_clip applies to the clipped surrogate only; set dual_clip=None for cispo")
    ratio = torch.exp(_log_ratio(logp, old_logp))
    adv = _expand(advantages, logp)
    weight = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high).detach()
    low = (ratio < 1.0 - eps_low) & (adv < 0)
    high = (ratio > 1.0 + eps_high) & (adv > 0)
    metrics = {"clip_low": low.float(), "clip_high": high.float(), "clip_region": (low | high).float()}
    return -weight * adv * logp, metrics


def sft_loss(
    logp: Tensor,
    old_logp: Tensor | None = None,
    advantages: Tensor | None = None,
    mask: Tensor | None = None,
    *,
    eps_low: float = 0.0,
    eps_high: float = 0.0,
    dual_clip: float | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Negative log-likelihood of the given tokens (the SFT half of MIX); ignores the RL inputs."""
    del old_logp, advantages, mask, eps_low, eps_high, dual_clip
    return -logp, {}


POLICY_LOSSES: dict[str, PolicyLossFn] = {
    "clipped": clipped_policy_loss,
    "gspo": gspo_policy_loss,
    "cispo": cispo_policy_loss,
    "sft": sft_loss,
}


# ----------------------------------------------------------------------------- helpers
def entropy_from_logits(logits: Tensor, *, chunk_size: int = 1024) -> Tensor:
    """Entropy of the softmax over the last dim, ``[..., V] -> [...]``, in float32.

    Works through the flattened positions ``chunk_size`` rows at a time so a bf16 ``[B, T, V]``
    never gets a full float32 copy. Stable through ``log_softmax``; a logit of -inf (a banned
    token) has p = 0 and contributes 0 rather than nan, also in the backward pass.
    """
    if chunk_size < 1:
        raise ConfigError(f"chunk_size must be >= 1, got {chunk_size}")
    lead_shape = logits.shape[:-1]
    flat = logits.reshape(-1, logits.shape[-1])
    parts = []
    for chunk in flat.split(chunk_size):
        logp = torch.log_softmax(chunk.float(), dim=-1)
        p = logp.exp()
        safe_logp = torch.where(p > 0, logp, torch.zeros_like(logp))
        parts.append(-(p * safe_logp).sum(-1))
    if not parts:
        return torch.zeros(lead_shape, dtype=torch.float32, device=logits.device)
    return torch.cat(parts).reshape(lead_shape)


def mask_truncated(mask: Tensor, is_truncated: Tensor) -> Tensor:
    """Zero the loss mask of completions cut off by the length limit (``mask_truncated_completions``).

    A truncated completion never got to its answer, so its (usually low) reward says little
    about its tokens; DAPO's overlong filtering drops it from the loss. Keeps ``mask``'s dtype.
    """
    if is_truncated.shape != (mask.shape[0],):
        raise ConfigError(f"is_truncated must be [batch]={mask.shape[0]}, got {tuple(is_truncated.shape)}")
    keep = (~is_truncated.to(torch.bool)).unsqueeze(-1)
    return mask * keep.to(mask.dtype) if mask.dtype != torch.bool else mask & keep


def importance_weights(
    old_logp: Tensor,
    sampler_logp: Tensor,
    mask: Tensor,
    *,
    cap: float = 3.0,
    mode: Literal["truncate", "mask"] = "mask",
    level: Literal["token", "sequence"] = "sequence",
) -> Tensor:
    """Off-policy correction weights exp(old_logp - sampler_logp), ``[B, T]``, detached.

    The sampler (vLLM, an older policy) is not exactly the trainer's policy, so samples are
    reweighted towards it. ``level="sequence"`` uses the product of the token ratios of each
    sequence (its likelihood ratio, the same value on every token); ``"token"`` one ratio per
    token. Above ``cap`` the weight is set to ``cap`` (``"truncate"``, TIS) or to 0
    (``"mask"``: the sample is too far off-policy to trust). TRL's default: sequence, mask, 3.
    Computed in log space so a long sequence cannot overflow to inf.
    """
    if cap <= 0:
        raise ConfigError(f"importance-weight cap must be > 0, got {cap}")
    if mode not in ("truncate", "mask"):
        raise ConfigError(f"unknown importance-weight mode {mode!r}; use 'truncate' or 'mask'")
    if level not in ("token", "sequence"):
        raise ConfigError(f"unknown importance-weight level {level!r}; use 'token' or 'sequence'")
    diff = torch.where(mask.to(torch.bool), (old_logp - sampler_logp).detach(), torch.zeros_like(old_logp))
    log_w = diff.sum(-1, keepdim=True).expand_as(diff) if level == "sequence" else diff
    log_cap = math.log(cap)
    if mode == "truncate":
        return torch.exp(torch.clamp(log_w, max=log_cap))
    return torch.where(log_w > log_cap, torch.zeros_like(log_w), torch.exp(torch.clamp(log_w, max=log_cap)))


def expert_count(ratio: float, batch: int) -> int:
    """Number of expert rows in a MIX batch: ceil(ratio x batch) (0.25 of 256 -> 64).

    Rounded to 9 decimals first so a float product such as 0.1 x 30 = 3.0000000000000004
    gives 3, not 4.
    """
    if not 0.0 <= ratio <= 1.0:
        raise ConfigError(f"expert ratio must be in [0, 1], got {ratio}")
    if batch < 0:
        raise ConfigError(f"batch size must be >= 0, got {batch}")
    return math.ceil(round(ratio * batch, 9))


def mix_loss(rl_loss: Tensor, sft_loss_value: Tensor, *, mu: float) -> Tensor:
    """Trinity-RFT MIX: (1 - mu) x RL loss on rollouts + mu x SFT loss on expert data."""
    if not 0.0 <= mu <= 1.0:
        raise ConfigError(f"mix mu must be in [0, 1], got {mu}")
    return (1.0 - mu) * rl_loss + mu * sft_loss_value


def _lookup(table: dict[str, _T], kind: str, name: str) -> _T:
    try:
        return table[name]
    except KeyError:
        raise ConfigError(f"unknown {kind} {name!r}; valid names: {', '.join(sorted(table))}") from None


def get_policy_loss(name: str) -> PolicyLossFn:
    """Look up a policy loss by name with an error that lists the valid ones."""
    return _lookup(POLICY_LOSSES, "policy loss", name)


def get_aggregation(name: str) -> AggregationFn:
    """Look up an aggregation by name with an error that lists the valid ones."""
    return _lookup(AGGREGATIONS, "loss aggregation", name)
