"""load_environment: find an environment package by id and build it.

Where it looks, in order: an importable module named like the id (``-`` → ``_``), an entry
point in the ``verifiers.environments`` group, and, so that a fresh clone runs its own
examples without an install step, the package folder ``./environments/<module>`` of a
repository checkout in the working directory.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import sys
from pathlib import Path
from typing import Any

from verifiers.envs.environment import Environment
from verifiers.errors import ConfigError, EnvError

ENTRY_POINT_GROUP = "verifiers.environments"
log = logging.getLogger(__name__)


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
    root = _checkout_package(module_name)
    if root is not None:
        log.info("environment %r is not installed; loading it from the checkout folder %s", env_id, root)
        sys.path.insert(0, str(root))
        return _find_loader(env_id)
    raise ConfigError(
        f"environment {env_id!r} is not installed (no module {module_name!r} and no "
        f"{ENTRY_POINT_GROUP!r} entry point named so). Install it with `vf-install {env_id}` "
        f"or `pip install -e environments/{module_name}`."
    )


def _checkout_package(module_name: str) -> Path | None:
    """``./environments/<module>`` when the working directory holds that package's source and it is
    not yet on ``sys.path`` (the same folder ``pip install -e environments/<module>`` would install)."""
    root = (Path.cwd() / "environments" / module_name).resolve()
    if not (root / module_name / "__init__.py").is_file() or str(root) in sys.path:
        return None
    return root


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
