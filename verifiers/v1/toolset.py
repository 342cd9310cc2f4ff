"""`Toolset`: a group of ``@vf.tool`` methods served to the model.

Upstream runs each toolset as an MCP server in a runtime. Here the null harness calls the
methods in process, under the names upstream advertises (``<server>_<tool>``, the server
being ``TOOL_PREFIX`` or the snake-cased class name; ``TOOL_PREFIX = None`` for bare names).
During a call, ``self.state`` is the calling rollout's state (a context variable keeps
concurrent rollouts apart).
"""

from __future__ import annotations

import contextvars
import os
import re
from collections.abc import Callable
from typing import Any, ClassVar, Generic

from pydantic import BaseModel
from typing_extensions import TypeVar

from verifiers.v1._generic import concrete_type
from verifiers.v1.configs import ToolsetConfig
from verifiers.v1.decorators import discover, hook_option
from verifiers.v1.state import State

ConfigT = TypeVar("ConfigT", bound=BaseModel, default=ToolsetConfig)
StateT = TypeVar("StateT", bound=State, default=State)

_call_state: contextvars.ContextVar[State | None] = contextvars.ContextVar("vf_v1_tool_state", default=None)


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


class Toolset(Generic[ConfigT, StateT]):
    TOOL_PREFIX: ClassVar[str | None] = ""
    """Empty: the snake-cased class name; None: tools are advertised without a prefix."""

    def __init__(self, config: ConfigT) -> None:
        # Required, as upstream's ``ServerBase.__init__(self, config)``: a toolset written here must
        # run there unchanged (``Arithmetic(vf.ToolsetConfig())``).
        self.config: ConfigT = config
        self._inert_state = self.state_type()()

    @classmethod
    def state_type(cls) -> type[State]:
        return concrete_type(cls, State) or State

    @property
    def state(self) -> StateT:
        current = _call_state.get()
        return current if current is not None else self._inert_state  # type: ignore[return-value]

    @property
    def server_name(self) -> str:
        if self.TOOL_PREFIX is None:
            return ""
        return self.TOOL_PREFIX or snake(type(self).__name__)

    @classmethod
    def run(cls) -> None:
        """Serve this toolset over MCP, its config from ``VF_CONFIG`` (JSON) when set: what a
        toolset module's ``if __name__ == "__main__": MyToolset.run()`` does (`verifiers.v1.serve`)."""
        from verifiers.v1.serve import serve

        config_cls = concrete_type(cls, BaseModel) or ToolsetConfig
        raw = os.environ.get("VF_CONFIG")
        serve(cls(config_cls.model_validate_json(raw) if raw else config_cls()))

    async def setup(self) -> None:
        """Initialize task-agnostic server state (once per instance)."""

    async def setup_task(self, task: Any) -> None:
        """Initialize per-task state; taskset-scoped toolsets skip this hook."""

    def tools(self) -> dict[str, Callable[..., Any]]:
        """Advertised name → bound ``@vf.tool`` method."""
        prefix = self.server_name
        out = {}
        for fn in discover(self, "tool"):
            raw = hook_option(fn, "tool_name") or fn.__name__
            out[f"{prefix}_{raw}" if prefix else raw] = fn
        return out


def bind_state(state: State, toolset: Toolset) -> contextvars.Token:
    """Make `state` what ``toolset.state`` returns for the current call."""
    wanted = toolset.state_type()
    if not isinstance(state, wanted):
        raise TypeError(
            f"{type(toolset).__name__} reads {wanted.__name__} but the task's state is "
            f"{type(state).__name__}; give the task and the toolset the same State type"
        )
    return _call_state.set(state)


def unbind_state(token: contextvars.Token) -> None:
    _call_state.reset(token)
