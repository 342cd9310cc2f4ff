"""How ``vf.load_environment(id, **kwargs)`` builds an environment from a v1 taskset package.

The core's loader names this module (it never imports it), and asks `environment_loader` about
a module that has no ``load_environment``. The keyword arguments map as follows:

- ``agent`` (a dict, upstream's ``--env.agent.*``): ``harness`` (``"null"``, the in-process chat
  loop, or ``"bash"``, a local agent program (`verifiers.v1.program_env`); or
  ``{"id": ..., "tool_timeout": ..., "disabled_tools": [...], "edit": ...}``), ``runtime``
  (``"subprocess"``), ``max_turns``;
- ``select`` (a dict, upstream's ``--select.*``, see `SelectOptions`): ``include``/``exclude``
  (``{"idx": [...], "ids": [...], "names": [...]}``), ``shuffle``, ``seed``, ``skip``, ``limit``;
- every other keyword is a field of the taskset's config (upstream's ``--env.taskset.*``),
  ``task`` being a dict of the task config's fields (``--env.taskset.task.*``).

``vf-eval TASKSET_ID`` with upstream's flags builds these keywords (`verifiers.v1.cli`).
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from pydantic import ValidationError

from verifiers.errors import ConfigError
from verifiers.v1.configs import AgentOptions, SelectOptions
from verifiers.v1.environment import TasksetEnv
from verifiers.v1.loaders import build_taskset, taskset_class, taskset_module_name
from verifiers.v1.program_env import TasksetProgramEnv
from verifiers.v1.taskset import Taskset


def select_tasks(taskset: Taskset, select: SelectOptions) -> Taskset:
    """`taskset` as the lazy view `select` names (include, exclude, shuffle, skip, limit)."""
    if not select.include.empty:
        taskset = taskset.include(select.include.idx, select.include.ids, select.include.names)
    if not select.exclude.empty:
        taskset = taskset.exclude(select.exclude.idx, select.exclude.ids, select.exclude.names)
    if select.shuffle:
        if taskset.INFINITE:
            raise ConfigError(
                f"{type(taskset).__name__} is infinite: select.shuffle needs select.limit or a closed "
                "select.include.idx range first"
            )
        taskset = taskset.shuffle(select.seed)
    if select.skip:
        taskset = taskset.skip(select.skip)
    if select.limit is not None:
        taskset = taskset.take(select.limit)
    return taskset


def environment_loader(module: ModuleType, env_id: str) -> Callable[..., TasksetEnv | TasksetProgramEnv] | None:
    """A ``load_environment(**kwargs)`` for `module` if it exports a `Taskset`, else None."""
    cls = taskset_class(module)
    if cls is None:
        return None
    taskset_id = taskset_module_name(env_id).replace("_", "-") if "/" in env_id or "@" in env_id else env_id

    def load_environment(
        agent: dict[str, Any] | AgentOptions | None = None,
        select: dict[str, Any] | SelectOptions | None = None,
        **overrides: Any,
    ) -> TasksetEnv | TasksetProgramEnv:
        try:
            options = agent if isinstance(agent, AgentOptions) else AgentOptions.model_validate(agent or {})
        except ValidationError as exc:
            raise ConfigError(f"taskset {env_id!r}: invalid `agent` option: {exc}") from exc
        try:
            chosen = select if isinstance(select, SelectOptions) else SelectOptions.model_validate(select or {})
        except ValidationError as exc:
            raise ConfigError(f"taskset {env_id!r}: invalid `select` option: {exc}") from exc
        taskset = select_tasks(build_taskset(cls, taskset_id, overrides), chosen)
        if options.harness.id != "null":  # an agent program run locally (verifiers.v1.program_env)
            return TasksetProgramEnv(taskset, agent=options, env_id=env_id)
        return TasksetEnv(taskset, agent=options, env_id=env_id)

    load_environment.taskset_class = cls  # type: ignore[attr-defined]  # how vf-eval tells a taskset

    load_environment.__doc__ = f"Build {cls.__name__} as an environment (see verifiers.v1.adapter)."
    return load_environment
