"""How far the sampler's logprobs are from the learner's, measured every step.

The inference server (vLLM, the embedded engine) samples with its own kernels, precision and
sampling code; the learner recomputes the same tokens' logprobs with the training model. On
policy the two should agree to rounding. A gap means the rollouts were not drawn from the
policy being trained (a missed weight sync, sampling parameters the server applied
differently, a precision mismatch), which GRPO's ratio does not see unless an off-policy
correction is on. TRL logs the same figures (``sampling/sampling_logp_difference``,
``sampling/importance_sampling_ratio``), so runs can be compared.

Measured on the first pass of each step (before any update), over the RL tokens trained.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from pydantic import BaseModel
from torch import Tensor


class MismatchStats(BaseModel):
    """Sums and extremes of |log pi_learner - log pi_sampler| and of the ratio pi_learner / pi_sampler."""

    tokens: int = 0
    abs_sum: float = 0.0
    ratio_sum: float = 0.0
    abs_max: float = 0.0
    ratio_max: float = 0.0
    ratio_min: float = math.inf

    def add(self, learner_logp: Tensor, sampler_logp: Tensor, mask: Tensor) -> None:
        """Add a micro-batch: ``[B, T]`` logprobs of both and the ``[B, T]`` mask of tokens to count."""
        keep = mask.to(torch.bool)
        n = int(keep.sum())
        if n == 0:
            return
        diff = (learner_logp.detach().float() - sampler_logp.detach().float())[keep]
        ratio = torch.exp(diff)
        self.tokens += n
        self.abs_sum += float(diff.abs().sum())
        self.ratio_sum += float(ratio.sum())
        self.abs_max = max(self.abs_max, float(diff.abs().max()))
        self.ratio_max = max(self.ratio_max, float(ratio.max()))
        self.ratio_min = min(self.ratio_min, float(ratio.min()))

    @classmethod
    def combine(cls, parts: Iterable[MismatchStats]) -> MismatchStats:
        """The statistics of several ranks' batches together."""
        out = cls()
        for p in parts:
            out.tokens += p.tokens
            out.abs_sum += p.abs_sum
            out.ratio_sum += p.ratio_sum
            out.abs_max = max(out.abs_max, p.abs_max)
            out.ratio_max = max(out.ratio_max, p.ratio_max)
            out.ratio_min = min(out.ratio_min, p.ratio_min)
        return out

    def metrics(self) -> dict[str, float]:
        """``sampler/*`` metrics (none when no token was measured)."""
        if not self.tokens:
            return {}
        return {
            "sampler/logp_diff_mean": self.abs_sum / self.tokens,
            "sampler/logp_diff_max": self.abs_max,
            "sampler/ratio_mean": self.ratio_sum / self.tokens,
            "sampler/ratio_min": self.ratio_min,
            "sampler/ratio_max": self.ratio_max,
        }
