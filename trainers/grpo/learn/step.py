"""The learner step: one optimizer step (or ``num_iterations``) on a built batch."""

from __future__ import annotations

from trainers.grpo.algo.losses import LossNormalizer
from trainers.grpo.dist.ranks import Dist


def global_normalizer(dist: Dist, local: LossNormalizer) -> LossNormalizer:
    """The normaliser of the union batch: every rank then divides by the same global counts."""
    if not dist.active:
        return local
    return LossNormalizer.combine([LossNormalizer(**p) for p in dist.gather(local.model_dump())])
