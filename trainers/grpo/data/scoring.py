"""Reward-function failures in generated rollouts, and when they stop the run.

The generator side (in-process or Ray workers) counts them; the run watch prints them; the
step feed stops a run whose reward function failed on (nearly) every rollout of a batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from trainers.grpo.dist.ranks import Dist
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


def stop_if_broken(failures: ScoringFailures, *, stop_share: float | None, step: int, dist: Dist) -> None:
    """Raise `RewardFunctionError` when a reward function failed on (by default) every rollout of a
    generated batch: the step would train on rewards of 0. ``step``: the step being generated for.

    Every rank decides together (``any_rank``), so all of them stop at the same batch.
    """
    worst = max(failures.per_function.items(), key=lambda kv: kv[1], default=(None, 0))
    broken = stop_share is not None and failures.rollouts > 0 and worst[1] >= stop_share * failures.rollouts
    if dist.any_rank(broken):
        where = worst[0] or "a reward function (on another process)"
        message = next((f"{kind}: {m}" for (w, kind), m in failures.first.items() if w == worst[0]), "")
        raise RewardFunctionError(
            f"{where} failed on {worst[1]}/{failures.rollouts} rollouts of step {step} ({message}). "
            "Training on it would learn nothing. Fix the function (vf.testing.check_environment(env) shows "
            "every reward function's errors on a few scripted rollouts), or set reward_error_stop_share = "
            "null to train anyway."
        )
