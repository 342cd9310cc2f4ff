"""What the rollout engine needs from an environment, as Protocols.

The engine runs any object with a ``rollout`` coroutine, a ``cleanup_state``
hook and a ``rubric`` that scores; it never needs `Environment` itself. Naming
only that much keeps `verifiers.rollout` below `verifiers.envs` (environments
call the engine, the engine does not import them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from verifiers.types import Info, Messages, RolloutScore, SamplingArgs, State


class Scorer(Protocol):
    """The scoring half of a rubric, as the engine calls it (`verifiers.Rubric` implements it)."""

    @property
    def has_group_funcs(self) -> bool: ...

    async def score_rollout(  # the engine passes these by keyword
        self, prompt: Any, completion: Any, answer: Any = "", state: dict[str, Any] | None = None,
        task: str = "default", info: dict[str, Any] | None = None, example_id: int | None = None,
    ) -> RolloutScore: ...

    async def score_group(self, rollouts: Sequence[dict[str, Any]], scores: list[RolloutScore]) -> None: ...


class RolloutTarget(Protocol):
    """What the engine runs (`verifiers.Environment` implements it)."""

    @property
    def rubric(self) -> Scorer: ...

    async def rollout(  # `Environment.rollout`'s signature
        self, client: Any, model: str, prompt: Messages, answer: str = "", task: str = "default",
        info: Info | None = None, sampling_args: SamplingArgs | None = None, **kwargs: Any,
    ) -> tuple[Messages, State]: ...

    def cleanup_state(self, state: State) -> Any:
        """Called once after every rollout; may return an awaitable (the engine awaits it)."""
