"""Per-token estimators of KL(pi || pi_ref), one pure function per name.

All take the per-token log-probabilities of the sampled tokens under the policy (``logp``)
and under the reference model (``ref_logp``) and return a tensor of the same shape. With
d = ref_logp - logp:

* ``k1`` = -d: unbiased, but negative on some tokens (high variance);
* ``k2`` = d^2 / 2: biased, always >= 0, its gradient is the true KL gradient's first-order term;
* ``k3`` / ``low_var_kl`` = exp(d) - d - 1: unbiased and always >= 0 (Schulman's estimator,
  GRPO's choice). d is clamped to [-20, 20] and the result to [-10, 10] as in verl, because a
  single token the policy has moved far away from would otherwise give exp(d) = inf;
* ``abs`` = |d|.

The test vector from ANCHORS §3: logp = -1.0, ref_logp = -1.5 gives 0.5, 0.125, 0.106531, 0.5.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

from verifiers.errors import ConfigError

K3_LOG_RATIO_CLAMP = 20.0
K3_VALUE_CLAMP = 10.0


class KLFn(Protocol):
    def __call__(self, logp: Tensor, ref_logp: Tensor) -> Tensor: ...


def kl_k1(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k1 = logp - ref_logp (the plain log-ratio)."""
    return logp - ref_logp


def kl_k2(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k2 = (ref_logp - logp)^2 / 2."""
    d = ref_logp - logp
    return 0.5 * d * d


def kl_k3(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k3 = exp(d) - d - 1 with verl's clamps (d to +-20, value to +-10) against overflow."""
    d = torch.clamp(ref_logp - logp, min=-K3_LOG_RATIO_CLAMP, max=K3_LOG_RATIO_CLAMP)
    return torch.clamp(torch.exp(d) - d - 1.0, min=-K3_VALUE_CLAMP, max=K3_VALUE_CLAMP)


def kl_abs(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """abs = |ref_logp - logp|."""
    return (ref_logp - logp).abs()


KL_ESTIMATORS: dict[str, KLFn] = {
    "k1": kl_k1,
    "k2": kl_k2,
    "k3": kl_k3,
    "low_var_kl": kl_k3,
    "abs": kl_abs,
}


def get_kl_fn(name: str) -> KLFn:
    """Look up an estimator by name with an error that lists the valid ones."""
    try:
        return KL_ESTIMATORS[name]
    except KeyError:
        raise ConfigError(
            f"unknown KL estimator {name!r}; valid names: {', '.join(sorted(KL_ESTIMATORS))}"
        ) from None
