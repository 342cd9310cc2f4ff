"""load_environment: find an installed environment package by id and build it."""

from __future__ import annotations

import importlib
import importlib.metadata
from typing import Any

from verifiers.envs.environment import Environment
from verifiers.errors import ConfigError, EnvError

ENTRY_POINT_GROUP = "verifiers.environments"


def _module_name(env_id: str) -> str:
    return env_id.replace("-", "_")


def _find_loader(env_id: str) -> Any:
    module_name = _module_name(env_id)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise  # the package exists but one of its own imports is missing
    else:
        fn = getattr(module, "load_environment", None)
        if fn is None:
            raise EnvError(f"module {module_name!r} has no load_environment(**kwargs) function")
        return fn
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in (env_id, module_name):
            return ep.load()
    raise ConfigError(
        f"environment {env_id!r} is not installed (no module {module_name!r} and no "
        f"{ENTRY_POINT_GROUP!r} entry point named so). Install it with `vf-install {env_id}` "
        f"or `pip install -e environments/{module_name}`."
    )


def load_environment(env_id: str, **env_args: Any) -> Environment:
    """Import the package for ``env_id`` (``-`` → ``_``) and call its ``load_environment(**env_args)``."""
    loader = _find_loader(env_id)
    try:
        env = loader(**env_args)
    except TypeError as exc:
        raise ConfigError(f"load_environment of {env_id!r} rejected the arguments {sorted(env_args)}: {exc}") from exc
    if not isinstance(env, Environment):
        raise EnvError(f"load_environment of {env_id!r} returned {type(env).__name__}, not an Environment")
    if env.env_id is None:
        env.env_id = env_id
    return env
