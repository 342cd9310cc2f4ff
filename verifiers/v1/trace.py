"""The `Trace`: what a v1 hook reads about one rollout, and where its scores are written.

Upstream's trace is a message graph shared by a harness in another process. Our null harness
runs the conversation in process as one linear branch, so this trace keeps the messages as a
list plus the point where the prompt ends (a prompt may itself hold assistant turns, which
``assistant_messages`` must not count), and exposes the same read-side properties.
"""

from __future__ import annotations

import traceback as _traceback
import uuid
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field

from verifiers.v1.messages import AssistantMessage, Message, ToolMessage, content_text
from verifiers.v1.state import State

TRUNCATING_STOPS = (
    "max_turns",
    "max_input_tokens",
    "max_output_tokens",
    "max_total_tokens",
    "prompt_too_long",
)


class TraceTask(BaseModel):
    """The task as recorded on the trace: class name, row data and identity."""

    type: str
    data: Any
    key: str | None = None
    hash: str | None = None


class Reward(BaseModel):
    score: float
    weight: float = 1.0

    @property
    def value(self) -> float:
        return self.score * self.weight


class ModelCall(BaseModel):
    """One model call of the rollout (what the harness saw of it)."""

    model: str | None = None
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str | None = None


class Error(BaseModel):
    type: str
    message: str
    traceback: str | None = None


class Trace(BaseModel):
    id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    task: TraceTask
    tools: list[dict[str, Any]] = Field(default_factory=list)
    """The tool schemas the model was offered."""
    prompt_messages: list[Message] = Field(default_factory=list)
    completion_messages: list[Message] = Field(default_factory=list)
    calls: list[ModelCall] = Field(default_factory=list)
    rewards: dict[str, Reward | None] = Field(default_factory=dict)
    """Named, weighted rewards; None: the reward was expected but did not score."""
    metrics: dict[str, float | None] = Field(default_factory=dict)
    info: dict[str, Any] = Field(default_factory=dict)
    """Scratch space for task-specific metadata."""
    state: State = Field(default_factory=State, exclude=True)
    is_completed: bool = False
    ok: bool = False
    stop_condition: str | None = None
    is_timeout: bool = False
    errors: list[Error] = Field(default_factory=list)

    # -- what hooks read -----------------------------------------------------------------
    @property
    def messages(self) -> list[Message]:
        """Prompt and completion, in order."""
        return [*self.prompt_messages, *self.completion_messages]

    @property
    def last_message(self) -> Message:
        messages = self.messages
        if not messages:
            raise ValueError("trace has no messages")
        return messages[-1]

    @property
    def num_turns(self) -> int:
        return len(self.assistant_messages)

    @property
    def assistant_messages(self) -> list[AssistantMessage]:
        """Every model reply, in order (assistant turns supplied by the prompt excluded)."""
        return [m for m in self.completion_messages if isinstance(m, AssistantMessage)]

    @property
    def tool_messages(self) -> list[ToolMessage]:
        return [m for m in self.messages if isinstance(m, ToolMessage)]

    @property
    def last_reply(self) -> str:
        replies = self.assistant_messages
        return (replies[-1].content or "").strip() if replies else ""

    @property
    def is_truncated(self) -> bool:
        """A framework limit ended the rollout, or the last reply ran out of tokens."""
        if self.stop_condition in TRUNCATING_STOPS:
            return True
        last = next((c for c in reversed(self.calls) if c.error is None), None)
        return bool(last and last.finish_reason == "length")

    @property
    def last_error(self) -> Error | None:
        return self.errors[-1] if self.errors else None

    @property
    def has_error(self) -> bool:
        return bool(self.errors)

    @property
    def reward(self) -> float:
        return sum(r.value for r in self.rewards.values() if r is not None)

    @property
    def transcript(self) -> str:
        """Text transcript of the conversation; tool calls shown, tool outputs kept."""
        blocks = []
        for message in self.messages:
            lines = [f"[{message.role}]"]
            if text := content_text(message.content):
                lines.append(text)
            if isinstance(message, AssistantMessage):
                lines.extend(f"[tool_call {c.name}({c.arguments})]" for c in message.tool_calls or [])
            blocks.append("\n".join(lines))
        return "\n\n".join(blocks)

    # -- what the runner writes ----------------------------------------------------------
    def record_metric(self, name: str, value: float) -> None:
        self.metrics[name] = float(value)

    def record_metrics(self, values: Mapping[str, float]) -> None:
        for name, value in values.items():
            self.record_metric(name, value)

    def record_reward(self, name: str, value: float, weight: float = 1.0) -> None:
        self.rewards[name] = Reward(score=float(value), weight=float(weight))

    def stop(self, condition: str, override: bool = False) -> None:
        """End the trace; the first condition wins unless `override`."""
        self.is_completed = True
        if override or self.stop_condition is None:
            self.stop_condition = condition

    def record_error(self, error: BaseException) -> None:
        self.errors.append(
            Error(
                type=type(error).__name__,
                message=str(error),
                traceback="".join(_traceback.format_exception(error)),
            )
        )
        self.ok = False
        self.stop("error")
