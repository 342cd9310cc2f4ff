"""Per-rollout state shared between a task's hooks and its toolsets.

Subclass it (``class MyState(vf.State)``) and name it in the task's generics
(``vf.Task[MyData, MyState]``); each rollout gets a fresh instance on ``trace.state``, which
toolsets read and write as ``self.state`` during a tool call.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class State(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    artifacts: dict[str, bytes | None] = Field(default_factory=dict)
