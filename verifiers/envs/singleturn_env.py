"""SingleTurnEnv: one model call per rollout (Q&A, math, formatting tasks)."""

from __future__ import annotations

from typing import Any

from verifiers.envs.multiturn_env import MultiTurnEnv
from verifiers.types import Messages, State


class SingleTurnEnv(MultiTurnEnv):
    async def is_completed(self, messages: Messages, state: State, **kwargs: Any) -> bool:
        return state["turn"] >= 1

    async def env_response(self, messages: Messages, state: State, **kwargs: Any) -> Any:
        raise NotImplementedError("SingleTurnEnv never asks the environment for a response")
