"""`TaskData` (the row, frozen, recorded on the trace) and `Task` (its behaviour).

A task's behaviour is its decorated methods: ``@vf.reward`` and ``@vf.metric`` score a finished
trace, ``@vf.stop`` ends a rollout early, and ``toolsets()`` names the tool servers each rollout
gets. Config can plug extra functions in by name (`TaskConfig.rewards` and friends).
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Generic

from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypeVar

from verifiers.v1._generic import concrete_type
from verifiers.v1.configs import TaskConfig
from verifiers.v1.decorators import discover, hook_option
from verifiers.v1.messages import Message, content_text
from verifiers.v1.plugged import plugged_hook
from verifiers.v1.scoring import score_trace
from verifiers.v1.state import State

if TYPE_CHECKING:
    from verifiers.v1.toolset import Toolset
    from verifiers.v1.trace import Trace


class TaskResources(BaseModel):
    model_config = ConfigDict(frozen=True)

    cpu: float | None = None
    memory: float | None = None
    gpu: str | None = None
    disk: float | None = None


class TaskTimeout(BaseModel):
    model_config = ConfigDict(frozen=True)

    setup: float | None = None
    agent: float | None = None
    finalize: float | None = None
    scoring: float | None = None


class TaskData(BaseModel):
    """One row. Subclass it for the task's own fields (a reference answer, test cases, ...)."""

    model_config = ConfigDict(frozen=True)

    idx: int | None = None
    """Position in the taskset's ``load()`` stream; set on iteration."""
    id: str | None = None
    name: str | None = None
    description: str | None = None
    prompt: str | list[Message] | None = None
    system_prompt: str | None = None
    image: str | None = None
    """Container image; a task with one needs a container runtime (not run here)."""
    workdir: str | None = None
    agent_user: str | None = None
    network_allow: list[str] = Field(default_factory=lambda: ["*"])
    network_block: list[str] = Field(default_factory=list)
    timeout: TaskTimeout = TaskTimeout()
    resources: TaskResources = TaskResources()

    @property
    def prompt_text(self) -> str:
        if isinstance(self.prompt, str):
            return self.prompt
        texts = [content_text(m.content) for m in self.prompt or []]
        return "\n\n".join(t for t in texts if t)


DataT = TypeVar("DataT", bound=TaskData, default=TaskData)
StateT = TypeVar("StateT", bound=State, default=State)
ConfigT = TypeVar("ConfigT", bound=TaskConfig, default=TaskConfig)

_PLUGGED = {"stop": "stops", "metric": "metrics", "reward": "rewards"}


def task_key(data: Mapping[str, Any]) -> str:
    """Content hash of a row, independent of field order."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


class Task(Generic[DataT, StateT, ConfigT]):
    NEEDS_CONTAINER: ClassVar[bool] = False
    """Whether the task needs an isolated filesystem (a container runtime; not run here)."""

    def __init__(self, data: DataT, config: ConfigT | None = None) -> None:
        self.data = data
        self.config: ConfigT = config if config is not None else self.config_type()()  # type: ignore[assignment]

    @property
    def hash(self) -> str:
        return task_key(self.data.model_dump(mode="json", exclude_none=True))

    @property
    def key(self) -> str:
        """Stable identity (the content hash unless overridden)."""
        return self.hash

    def with_data(self, **update: Any) -> Task:
        clone = copy.copy(self)
        clone.data = self.data.model_copy(update=update)
        return clone

    async def setup(self, trace: Trace, runtime: Any = None) -> None:
        """Prepare the rollout before the first model turn (runtime is None here: in process)."""

    async def finalize(self, trace: Trace, runtime: Any = None) -> None:
        """Runs after the rollout, before scoring."""

    def hooks(self, kind: str) -> list[Callable[..., Any]]:
        """The task's ``@vf.<kind>`` methods merged with config-plugged ones of the same kind (a
        plugged entry replaces the method of its name), highest priority first, then by name."""
        merged = {fn.__name__: fn for fn in discover(self, kind)}
        plugged = getattr(self.config, _PLUGGED[kind], {}) if kind in _PLUGGED else {}
        for name, spec in plugged.items():
            merged[name] = plugged_hook(name, spec, kind, merged.get(name))
        fns = list(merged.values())
        fns.sort(key=lambda fn: (-int(hook_option(fn, "priority", 0) or 0), fn.__name__))
        return fns

    async def score(self, trace: Trace, runtime: Any = None) -> list[tuple[str, BaseException]]:
        """Run metrics then rewards into ``trace.metrics`` / ``trace.rewards``; returns the
        exceptions of hooks that failed (their names stay None on the trace)."""
        return await score_trace(self.hooks("metric"), self.hooks("reward"), self.data, trace, runtime)

    @classmethod
    def toolsets(cls, config: Any) -> list[Toolset]:
        """Tool servers each rollout gets (fresh instances per rollout)."""
        return []

    @classmethod
    def data_type(cls) -> type[TaskData]:
        return concrete_type(cls, TaskData) or TaskData

    @classmethod
    def state_type(cls) -> type[State]:
        return concrete_type(cls, State) or State

    @classmethod
    def config_type(cls) -> type[TaskConfig]:
        return concrete_type(cls, TaskConfig) or TaskConfig


TaskT = TypeVar("TaskT", bound=Task, default=Task)
