"""What the gateway records per model call and what bounds a session, as data.

Pydantic models so that a rollout's calls can be saved with its results and read back
(``vf-eval -s``), and so that the bounds given by an environment are checked when it is
built rather than halfway through a run.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PositiveInt

from verifiers.types import TurnTokens

NOT_FOLLOW_UPS = frozenset({"first_call", "no_earlier_call"})
"""Plain-call reasons of calls that extend no earlier call (a fresh conversation, e.g. a sub-agent's)."""


class SessionLimits(BaseModel):
    """Per-rollout budgets. A call over a budget is answered 400 ``rollout stopped: ...``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_calls: PositiveInt | None = 64
    """Model calls one rollout may make (None: no bound)."""
    max_tokens: PositiveInt | None = None
    """Sampled tokens over the whole rollout (None: no bound); each call's ``max_tokens`` is
    capped to what is left."""


class GatewayCall(BaseModel):
    """One model call of a program, in arrival order (``seq``)."""

    seq: int
    started: float
    ended: float = 0.0
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    reply: dict[str, Any] | None = None
    """The assistant message the program received (None when the call failed)."""
    tokens: TurnTokens | None = None
    finish_reason: str | None = None
    status: int = 0
    """The HTTP status the program got (0 while the call is in flight)."""
    error: str | None = None
    tool_choice: Any = None
    """The program's ``tool_choice`` (None when it sent none)."""
    token_in: bool = False
    """True when the prompt went upstream as token ids built from an earlier call (token-exact)."""
    plain_reason: str | None = None
    """Why the call went as messages when token-in was on (``first_call``, ``stop_string``, ...)."""
    retries_replayed: int = Field(0, ge=0)
    """SDK retries of this call answered from the record instead of sampling again."""
