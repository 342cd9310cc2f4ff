"""Algorithms as named presets over the function tables, and the one loss entry point.

An algorithm is data, not code: an :class:`AlgorithmPreset` names an advantage estimator, a
per-token policy loss, an aggregation, a KL estimator and a handful of switches. The trainer
resolves a preset with :func:`get_algorithm` (overrides validated like the preset itself) and
calls :func:`compute_loss` for every micro-batch; nothing else in the loss path branches on
the algorithm's name.

Presets (sources in brackets):

* ``grpo``: group-normalised advantages, clipped surrogate eps 0.2, per-sequence token mean
  then mean over sequences [DeepSeekMath]; beta 0 (TRL's default; no reference model loaded).
* ``dr_grpo``: no std scaling, sum / (sequences x max completion length) [Dr. GRPO].
* ``dapo``: clip-higher (0.2 / 0.28), token-level mean, dynamic sampling (drop zero-variance
  groups and refill), overlong masking of truncated completions, beta 0 [DAPO].
* ``gspo``: sequence-level ratio clipped at 1 - 3e-4 / 1 + 4e-4, sequence-mean aggregation,
  beta 0 [GSPO paper v2 section 5.1, TRL's reproduction config].
* ``cispo``: detached clipped ratio as weight on log pi, bounds [0, 5], token-level mean
  [MiniMax-M1; bounds as TRL's recommendation and ScaleRL].
* ``mix``: GRPO on rollouts mixed with SFT on expert data, (1 - mu) x GRPO + mu x SFT,
  mu 0.1, expert share ceil(0.25 x batch) [Trinity-RFT MIX].
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from torch import Tensor

from trainers.grpo.algo.advantages import ADVANTAGES, SCALES
from trainers.grpo.algo.kl import KL_ESTIMATORS
from trainers.grpo.algo.losses import (
    AGGREGATIONS,
    POLICY_LOSSES,
    LossNormalizer,
    expert_rows,
    importance_weights,
    mix_loss,
    token_mean_contribution,
)
from verifiers.errors import ConfigError


class OffPolicyConfig(BaseModel):
    """Importance weights exp(old_logp - sampler_logp) against sampler/policy mismatch."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cap: float = Field(3.0, gt=0)
    mode: Literal["truncate", "mask"] = "mask"
    level: Literal["token", "sequence"] = "sequence"


class MixConfig(BaseModel):
    """Trinity-RFT MIX: weight ``mu`` of the SFT loss and the expert share of each batch."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mu: float = Field(0.1, ge=0, le=1)
    expert_ratio: float = Field(0.25, ge=0, lt=1)


class AlgorithmPreset(BaseModel):
    """Everything that distinguishes one GRPO-family algorithm from another.

    Names refer to the tables: ``advantage`` in ``ADVANTAGES``, ``policy_loss`` in
    ``POLICY_LOSSES``, ``aggregation`` / ``sft_aggregation`` in ``AGGREGATIONS``,
    ``kl_estimator`` in ``KL_ESTIMATORS``. ``beta`` = 0 means no reference model is needed.
    ``entropy_coef`` > 0 subtracts an entropy bonus. ``filter_zero_std_groups`` asks the
    store to drop groups whose rewards are all equal (their advantages are 0) and the
    generator to refill. ``mask_truncated_completions`` removes truncated completions from the
    loss. ``off_policy`` enables importance weights from sampler logprobs; ``mix`` turns on MIX.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "custom"
    description: str = ""
    advantage: str = "grpo"
    scale: Literal["group", "batch", "none"] = "group"
    eps: float = Field(1e-4, ge=0)
    policy_loss: str = "clipped"
    aggregation: str = "grpo"
    eps_low: float = Field(0.2, ge=0)
    eps_high: float = Field(0.2, ge=0)
    dual_clip: float | None = Field(None, gt=1)
    kl_estimator: str = "k3"
    beta: float = Field(0.0, ge=0)
    entropy_coef: float = 0.0
    filter_zero_std_groups: bool = False
    mask_truncated_completions: bool = False
    off_policy: OffPolicyConfig | None = None
    mix: MixConfig | None = None
    sft_aggregation: str = "bnpo"

    @model_validator(mode="after")
    def _names_exist(self) -> AlgorithmPreset:
        for field, table in (
            ("advantage", ADVANTAGES),
            ("policy_loss", POLICY_LOSSES),
            ("aggregation", AGGREGATIONS),
            ("sft_aggregation", AGGREGATIONS),
            ("kl_estimator", KL_ESTIMATORS),
        ):
            value = getattr(self, field)
            if value not in table:
                raise ValueError(f"{field}={value!r} is unknown; valid: {', '.join(sorted(table))}")
        if self.scale not in SCALES:  # pragma: no cover - guarded by Literal
            raise ValueError(f"scale={self.scale!r} is unknown")
        if self.advantage == "dr_grpo" and self.scale != "none":
            raise ValueError("advantage='dr_grpo' means no std scaling; set scale='none'")
        if self.dual_clip is not None and self.policy_loss not in ("clipped", "gspo"):
            raise ValueError(
                f"dual_clip works with the clipped surrogates only, not policy_loss={self.policy_loss!r}"
            )
        return self

    @property
    def uses_reference(self) -> bool:
        """Whether a reference model must be loaded (beta != 0)."""
        return self.beta != 0.0


_BASE_GRPO: dict[str, Any] = {
    "advantage": "grpo",
    "scale": "group",
    "eps": 1e-4,
    "policy_loss": "clipped",
    "aggregation": "grpo",
    "eps_low": 0.2,
    "eps_high": 0.2,
    "beta": 0.0,
}

ALGORITHMS: dict[str, AlgorithmPreset] = {
    "grpo": AlgorithmPreset(
        name="grpo",
        description="GRPO: group-normalised advantages, clipped surrogate, sequence mean",
        **_BASE_GRPO,
    ),
    "dr_grpo": AlgorithmPreset(
        name="dr_grpo",
        description="Dr. GRPO: no std scaling, constant normaliser (sequences x max length)",
        **{**_BASE_GRPO, "advantage": "dr_grpo", "scale": "none", "aggregation": "dr_grpo"},
    ),
    "dapo": AlgorithmPreset(
        name="dapo",
        description="DAPO: clip-higher, token-level mean, dynamic sampling, overlong masking",
        **{
            **_BASE_GRPO,
            "aggregation": "dapo",
            "eps_high": 0.28,
            "filter_zero_std_groups": True,
            "mask_truncated_completions": True,
        },
    ),
    "gspo": AlgorithmPreset(
        name="gspo",
        description="GSPO: sequence-level importance ratio with a tight clip",
        **{**_BASE_GRPO, "policy_loss": "gspo", "eps_low": 3e-4, "eps_high": 4e-4},
    ),
    "cispo": AlgorithmPreset(
        name="cispo",
        description="CISPO: clipped, detached importance weight on log pi; no token loses its gradient",
        **{**_BASE_GRPO, "policy_loss": "cispo", "aggregation": "dapo", "eps_low": 1.0, "eps_high": 4.0},
    ),
    "mix": AlgorithmPreset(
        name="mix",
        description="MIX: (1 - mu) GRPO on rollouts + mu SFT on expert data",
        **{**_BASE_GRPO, "mix": MixConfig(mu=0.1, expert_ratio=0.25)},
    ),
}


def get_algorithm(name: str, **overrides: Any) -> AlgorithmPreset:
    """The preset ``name`` with ``overrides`` applied and validated as a whole.

    Nested settings take dicts (``off_policy={"cap": 2.0}`` is merged into the preset's
    ``off_policy``, or into the defaults when the preset has none; ``off_policy=None`` turns it
    off). Unknown names and fields raise :class:`ConfigError` listing what is valid.
    """
    if name not in ALGORITHMS:
        raise ConfigError(f"unknown algorithm {name!r}; valid names: {', '.join(sorted(ALGORITHMS))}")
    data = ALGORITHMS[name].model_dump()
    for key, value in overrides.items():
        if key in ("off_policy", "mix") and isinstance(value, dict):
            data[key] = {**(data.get(key) or {}), **value}
        else:
            data[key] = value
    try:
        return AlgorithmPreset.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'preset'}: {err['msg']}" for err in exc.errors()
        )
        fields = ", ".join(AlgorithmPreset.model_fields)
        raise ConfigError(
            f"invalid settings for algorithm {name!r}: {problems} (valid fields: {fields})"
        ) from None


def _zero_outside(values: Tensor, mask: Tensor) -> Tensor:
    if values.shape != mask.shape:
        raise ConfigError(
            f"per-token inputs must match loss_mask {tuple(mask.shape)}, got {tuple(values.shape)}"
        )
    return torch.where(mask, values, torch.zeros_like(values))


ADVANTAGE_SCALED_LOSSES = frozenset({"clipped", "gspo", "cispo"})
"""Policy losses whose every term is the advantage times something: 0 where the advantage is 0."""


def rows_with_gradient(preset: AlgorithmPreset, advantages: Tensor, is_expert: Tensor) -> Tensor:
    """``[N]`` bool: the rows whose loss can have a non-zero gradient under ``preset``.

    Every policy loss here is the advantage times a policy term (ratios, clipping and
    off-policy weights only scale it), so an RL row whose advantage is 0 at every token adds
    exactly nothing to the loss or its gradient, unless a KL penalty or an entropy bonus
    (which do not depend on the advantage) is on. Early in training most groups score alike
    (all 0 for a model that cannot yet do the task, all 1 for an easy prompt), and training
    on their rows is most of a step's compute for an unchanged update. Expert (SFT) rows
    always count, and so does every row under a policy loss not known to scale with the
    advantage (``sft``, or one a user registered).
    """
    if preset.beta != 0.0 or preset.entropy_coef != 0.0 or preset.policy_loss not in ADVANTAGE_SCALED_LOSSES:
        return torch.ones(advantages.shape[0], dtype=torch.bool, device=advantages.device)
    nonzero = advantages != 0 if advantages.dim() == 1 else (advantages != 0).any(dim=-1)
    return nonzero | is_expert.to(nonzero.device)


def compute_loss(
    preset: AlgorithmPreset,
    *,
    logp: Tensor,
    old_logp: Tensor | None = None,
    ref_logp: Tensor | None = None,
    sampler_logp: Tensor | None = None,
    advantages: Tensor,
    loss_mask: Tensor,
    is_expert: Tensor | None = None,
    entropy: Tensor | None = None,
    normalizer: LossNormalizer,
    sequence_tokens: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """The loss of one micro-batch: the only loss function the trainer calls.

    Shapes: ``logp``, ``old_logp``, ``ref_logp``, ``sampler_logp``, ``loss_mask`` and
    ``entropy`` are ``[B, T]`` over completion tokens; ``advantages`` is ``[B]`` or ``[B, T]``;
    ``is_expert`` is ``[B]`` bool. ``old_logp=None`` means on-policy (old = logp detached, so
    the ratio is 1). ``loss_mask`` must already exclude truncated completions when the preset
    masks them (:func:`trainers.grpo.algo.losses.mask_truncated`), and ``normalizer`` must come from
    the whole optimizer-step batch with the same mask. ``sequence_tokens`` ``[B]`` gives each
    row's rollout's trained tokens over that batch (:func:`trainers.grpo.algo.losses.rollout_token_counts`)
    when a rollout may be several rows; the sequence-mean aggregation then weighs a rollout once.

    Per RL token: policy loss x off-policy weight + beta x KL - entropy_coef x entropy,
    aggregated by ``preset.aggregation``. Expert rows (MIX) get -logp aggregated by
    ``preset.sft_aggregation`` over the expert counts; the result is
    (1 - mu) x RL + mu x SFT. KL and entropy apply to RL rows only.

    Returns ``(loss, metrics)``. The loss and every metric are *contributions*: summed over the
    micro-batches of one optimizer step they give the full-batch value exactly (token metrics
    are means over all RL tokens of the step). Metric keys: ``loss``, ``clip_ratio/low_mean``,
    ``clip_ratio/high_mean``, ``clip_ratio/region_mean``, plus ``clip_ratio/dual_mean`` (dual
    clip), ``kl`` (when ``ref_logp`` is given), ``entropy`` (when given),
    ``off_policy/weight_mean`` and ``off_policy/masked_frac`` (off-policy correction),
    ``loss/rl`` and ``loss/sft`` (MIX).
    """
    mask, expert = _check_batch(preset, logp, loss_mask, is_expert)
    rl_mask = mask & ~expert.unsqueeze(-1)
    # Zero every input on untrained positions first: padding may hold inf or nan (e.g. logp of a
    # pad token), and a nan there would otherwise reach the gradient through exp/mul backward.
    logp = _zero_outside(logp, mask)
    old = logp.detach() if old_logp is None else _zero_outside(old_logp.detach(), mask)
    ref_logp = None if ref_logp is None else _zero_outside(ref_logp.detach(), mask)
    sampler_logp = None if sampler_logp is None else _zero_outside(sampler_logp.detach(), mask)
    entropy = None if entropy is None else _zero_outside(entropy, mask)
    if advantages.dim() == 2:
        advantages = _zero_outside(advantages, mask)

    metrics: dict[str, Tensor] = {}
    per_token = _policy_term(preset, logp, old, advantages, rl_mask, normalizer, metrics)
    per_token = _off_policy_term(preset, per_token, old, sampler_logp, rl_mask, normalizer, metrics)
    per_token = _kl_term(preset, per_token, logp, ref_logp, rl_mask, normalizer, metrics)
    per_token = _entropy_term(preset, per_token, entropy, rl_mask, normalizer, metrics)

    if sequence_tokens is not None and sequence_tokens.shape != (logp.shape[0],):
        raise ConfigError(f"sequence_tokens must be [batch]={logp.shape[0]}, got {tuple(sequence_tokens.shape)}")
    rl_loss = AGGREGATIONS[preset.aggregation](per_token, rl_mask, normalizer, sequence_tokens=sequence_tokens)
    if preset.mix is None:
        loss = rl_loss
    else:
        sft_mask = mask & expert.unsqueeze(-1)
        sft = AGGREGATIONS[preset.sft_aggregation](-logp, sft_mask, normalizer.for_expert())
        loss = mix_loss(rl_loss, sft, mu=preset.mix.mu)
        metrics["loss/rl"] = rl_loss.detach()
        metrics["loss/sft"] = sft.detach()
    metrics["loss"] = loss.detach()
    return loss, metrics


def _check_batch(preset: AlgorithmPreset, logp: Tensor, loss_mask: Tensor,
                 is_expert: Tensor | None) -> tuple[Tensor, Tensor]:
    """The boolean loss mask and the expert-row flags; refuses a misshaped batch or stray expert rows."""
    if logp.dim() != 2 or loss_mask.shape != logp.shape:
        raise ConfigError(
            f"logp and loss_mask must both be [batch, tokens]; got {tuple(logp.shape)} and {tuple(loss_mask.shape)}"
        )
    mask = loss_mask.to(torch.bool)
    expert = expert_rows(is_expert, logp.shape[0], logp.device)
    if bool(expert.any()) and preset.mix is None:
        raise ConfigError(
            f"the batch has expert rows (is_expert) but algorithm {preset.name!r} has no mix settings; "
            "use algorithm 'mix' or set mix={...}"
        )
    return mask, expert


def _policy_term(preset: AlgorithmPreset, logp: Tensor, old: Tensor, advantages: Tensor, rl_mask: Tensor,
                 normalizer: LossNormalizer, metrics: dict[str, Tensor]) -> Tensor:
    """The preset's per-token policy loss; its clip ratios go into ``metrics``."""
    policy_fn = POLICY_LOSSES[preset.policy_loss]
    per_token, token_metrics = policy_fn(
        logp,
        old,
        advantages,
        rl_mask,
        eps_low=preset.eps_low,
        eps_high=preset.eps_high,
        dual_clip=preset.dual_clip,
    )
    for key, name in (
        ("clip_low", "low"),
        ("clip_high", "high"),
        ("clip_region", "region"),
        ("clip_dual", "dual"),
    ):
        if key in token_metrics:
            metrics[f"clip_ratio/{name}_mean"] = token_mean_contribution(
                token_metrics[key], rl_mask, normalizer
            )
    return per_token


def _off_policy_term(preset: AlgorithmPreset, per_token: Tensor, old: Tensor, sampler_logp: Tensor | None,
                     rl_mask: Tensor, normalizer: LossNormalizer, metrics: dict[str, Tensor]) -> Tensor:
    """``per_token`` weighted by the off-policy correction (sampler vs old policy), when the preset has one."""
    if preset.off_policy is None:
        return per_token
    if sampler_logp is None:
        raise ConfigError(
            f"algorithm {preset.name!r} has off_policy correction on but no sampler_logp was given; "
            "pass the sampler's per-token logprobs or set off_policy=None"
        )
    cfg = preset.off_policy
    weights = importance_weights(old, sampler_logp, rl_mask, cap=cfg.cap, mode=cfg.mode, level=cfg.level)
    metrics["off_policy/weight_mean"] = token_mean_contribution(weights, rl_mask, normalizer)
    metrics["off_policy/masked_frac"] = token_mean_contribution(
        (weights == 0).float(), rl_mask, normalizer
    )
    return per_token * weights


def _kl_term(preset: AlgorithmPreset, per_token: Tensor, logp: Tensor, ref_logp: Tensor | None, rl_mask: Tensor,
             normalizer: LossNormalizer, metrics: dict[str, Tensor]) -> Tensor:
    """``per_token`` plus beta x KL to the reference (the KL is measured whenever ``ref_logp`` is given)."""
    if ref_logp is not None:
        kl = KL_ESTIMATORS[preset.kl_estimator](logp, ref_logp)
        metrics["kl"] = token_mean_contribution(kl, rl_mask, normalizer)
        if preset.beta != 0.0:
            per_token = per_token + preset.beta * kl
    elif preset.beta != 0.0:
        raise ConfigError(
            f"algorithm {preset.name!r} has beta={preset.beta} but no ref_logp was given; "
            "load a reference model or set beta=0"
        )
    return per_token


def _entropy_term(preset: AlgorithmPreset, per_token: Tensor, entropy: Tensor | None, rl_mask: Tensor,
                  normalizer: LossNormalizer, metrics: dict[str, Tensor]) -> Tensor:
    """``per_token`` minus entropy_coef x entropy (the entropy is measured whenever it is given)."""
    if entropy is not None:
        metrics["entropy"] = token_mean_contribution(entropy, rl_mask, normalizer)
        if preset.entropy_coef != 0.0:
            per_token = per_token - preset.entropy_coef * entropy
    elif preset.entropy_coef != 0.0:
        raise ConfigError(
            f"algorithm {preset.name!r} has entropy_coef={preset.entropy_coef} but no entropy was given; "
            "compute it with entropy_from_logits or set entropy_coef=0"
        )
    return per_token


__all__ = [
    "ALGORITHMS",
    "AlgorithmPreset",
    "MixConfig",
    "OffPolicyConfig",
    "compute_loss",
    "get_algorithm",
]
