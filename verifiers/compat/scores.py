"""0.1.x scoring results: ``RolloutScores`` (one column per metric) next to `RolloutScore`."""

from __future__ import annotations

from pydantic import BaseModel, Field

from verifiers.types import RolloutScore

__all__ = ["RolloutScore", "RolloutScores"]


class RolloutScores(BaseModel):
    """What ``Rubric.score_rollouts`` returns: one reward per rollout, metrics as columns."""

    reward: list[float]
    metrics: dict[str, list[float]] = Field(default_factory=dict)
