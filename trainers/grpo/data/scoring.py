"""Reward-function failures in generated rollouts, and when they stop the run.

The generator side (in-process or Ray workers) counts them; the run watch prints them; the
step feed stops a run whose reward function failed on (nearly) every rollout of a batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from verifiers.errors import RubricError
from verifiers.types import RolloutResult


class RewardFunctionError(RubricError):
    """A reward function failed on (nearly) every rollout of a step: training on it would learn nothing."""


@dataclass
class ScoringFailures:
    """Reward-function failures in a set of rollouts: counts per function and one message per error kind."""

    rollouts: int = 0
    failed_rollouts: int = 0  # rollouts with at least one scoring error
    per_function: dict[str, int] = field(default_factory=dict)
    first: dict[tuple[str, str], str] = field(default_factory=dict)  # (where, type) -> message

    @classmethod
    def of(cls, results: Iterable[RolloutResult]) -> ScoringFailures:
        out = cls()
        for r in results:
            out.rollouts += 1
            if not r.scoring_errors:
                continue
            out.failed_rollouts += 1
            for where in {e.where for e in r.scoring_errors}:
                out.per_function[where] = out.per_function.get(where, 0) + 1
            for e in r.scoring_errors:
                out.first.setdefault((e.where, e.type), e.message)
        return out


def merge_failures(parts: Sequence[ScoringFailures]) -> ScoringFailures:
    out = ScoringFailures()
    for p in parts:
        out.rollouts += p.rollouts
        out.failed_rollouts += p.failed_rollouts
        for k, n in p.per_function.items():
            out.per_function[k] = out.per_function.get(k, 0) + n
        for k, m in p.first.items():
            out.first.setdefault(k, m)
    return out
