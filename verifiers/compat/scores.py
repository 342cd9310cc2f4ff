"""0.1.x scoring results: ``RolloutScores`` (one column per metric) next to `RolloutScore`.

Both live in `verifiers.types`; this module is where the rubric's 0.1.x methods import them from.
"""

from __future__ import annotations

from verifiers.types import RolloutScore, RolloutScores

__all__ = ["RolloutScore", "RolloutScores"]
