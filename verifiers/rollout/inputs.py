"""What one rollout starts from."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verifiers.types import Info, Messages


@dataclass(slots=True)
class RolloutInput:
    """One sample to generate. ``group_id`` ties together the samples that share a prompt.

    Group ids are explicit (never derived from the dataset index) because the same
    prompt may legitimately appear in two groups of one batch.
    """

    example_id: int
    prompt: Messages
    answer: str = ""
    task: str = "default"
    info: Info = field(default_factory=dict)
    group_id: int = 0
    rollout_index: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
