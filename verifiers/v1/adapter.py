"""How ``vf.load_environment(id, **kwargs)`` builds an environment from a v1 taskset package.

The core's loader names this module (it never imports it), and asks `environment_loader` about
a module that has no ``load_environment``. The keyword arguments map as follows:

- ``agent`` (a dict, upstream's ``--env.agent.*``): ``harness`` (``"null"`` or
  ``{"id": "null", "tool_timeout": ..., "disabled_tools": [...]}``), ``runtime``
  (``"subprocess"``), ``max_turns``;
- every other keyword is a field of the taskset's config (upstream's ``--env.taskset.*``),
  ``task`` being a dict of the task config's fields (``--env.taskset.task.*``).
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from pydantic import ValidationError

from verifiers.errors import ConfigError
from verifiers.v1.configs import AgentOptions
from verifiers.v1.environment import TasksetEnv
from verifiers.v1.loaders import build_taskset, taskset_class, taskset_module_name


def environment_loader(module: ModuleType, env_id: str) -> Callable[..., TasksetEnv] | None:
    """A ``load_environment(**kwargs)`` for `module` if it exports a `Taskset`, else None."""
    cls = taskset_class(module)
    if cls is None:
        return None
    taskset_id = taskset_module_name(env_id).replace("_", "-") if "/" in env_id or "@" in env_id else env_id

    def load_environment(agent: dict[str, Any] | AgentOptions | None = None, **overrides: Any) -> TasksetEnv:
        try:
            options = agent if isinstance(agent, AgentOptions) else AgentOptions.model_validate(agent or {})
        except ValidationError as exc:
            raise ConfigError(f"taskset {env_id!r}: invalid `agent` option: {exc}") from exc
        taskset = build_taskset(cls, taskset_id, overrides)
        return TasksetEnv(taskset, agent=options, env_id=env_id)

    load_environment.__doc__ = f"Build {cls.__name__} as an environment (see verifiers.v1.adapter)."
    return load_environment
