"""load_environment: find an environment package by id and build it.

Where it looks, in order: an importable module named like the id (``-`` → ``_``, see
`verifiers.envs.names`), an entry point in the ``verifiers.environments`` group, and, so that
a fresh clone runs its own examples without an install step, the folder ``./environments``
of the working directory, in every layout vf-eval reads there (`find_local_env`). vf-eval
and vf-train both load through here, so they find the same environments.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import sys
from pathlib import Path
from typing import Any

from verifiers.envs.environment import Environment
from verifiers.envs.names import ENVIRONMENTS_DIR, find_local_env, module_name
from verifiers.errors import ConfigError, EnvError

ENTRY_POINT_GROUP = "verifiers.environments"
ADAPTERS = ("verifiers.v1.adapter",)
"""Layers above the core that can build an environment from a module without ``load_environment``
(a v1 taskset package exports a ``Taskset`` instead). Named, not imported: the core does not
depend on them, and each is imported only when such a module turns up. Each has
``environment_loader(module, env_id)`` returning a ``load_environment(**kwargs)`` or None."""
log = logging.getLogger(__name__)


def _find_loader(env_id: str) -> Any:
    module = module_name(env_id)
    fn, shadowed = _import_loader(module, env_id)
    if fn is not None:
        return fn
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in (env_id, module):
            return ep.load()
    # An environment that wraps a library of the same name (reasoning-gym wraps `reasoning_gym`)
    # cannot take the library's module name: its source is <module>_env.
    for candidate in (env_id, f"{env_id}-env"):
        if candidate != env_id and (fn := _import_loader(module_name(candidate), env_id)[0]) is not None:
            return fn  # importable already (installed without its entry point, or on sys.path)
        root = _checkout_folder(candidate)
        if root is None:
            continue
        # Code from the working directory runs here: say so (docs/security.md), once per environment.
        log.warning(
            "environment %r is not installed: importing it from %s in the working directory "
            "(install it, e.g. `pip install -e %s`, to load the installed copy instead)",
            env_id, root, _install_target(root, candidate),
        )
        sys.path.insert(0, str(root))
        fn, _ = _import_loader(module_name(candidate), env_id)
        if fn is not None:
            return fn
    if shadowed:
        raise EnvError(f"module {module!r} has no load_environment(**kwargs) function and exports no v1 Taskset "
                       f"subclass in __all__ (if it is a library, name "
                       f"the environment's module {module}_env and register it under the "
                       f"{ENTRY_POINT_GROUP!r} entry point {env_id!r})")
    raise ConfigError(
        f"environment {env_id!r} is not installed (no module {module!r}, no "
        f"{ENTRY_POINT_GROUP!r} entry point named so, and no checkout under "
        f"{Path.cwd() / ENVIRONMENTS_DIR}). Install it with `vf-install {env_id}` "
        f"or `pip install -e environments/{module}`, or run from the folder that holds environments/{module}."
    )


def find_loader(env_id: str) -> Any:
    """The ``load_environment(**kwargs)`` that ``env_id`` resolves to, without calling it (vf-eval asks
    whether it is a v1 taskset's: the adapter marks its loaders with ``taskset_class``)."""
    return _find_loader(env_id)


def _import_loader(module: str, env_id: str) -> tuple[Any, bool]:
    """``module.load_environment`` (or what an adapter builds for it, see `ADAPTERS`), or None;
    and whether ``module`` imported without either."""
    try:
        imported = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module:
            raise  # the package exists but one of its own imports is missing
        return None, False
    fn = getattr(imported, "load_environment", None)
    for adapter in ADAPTERS if fn is None else ():
        fn = importlib.import_module(adapter).environment_loader(imported, env_id)
        if fn is not None:
            break
    return fn, fn is None


def _checkout_folder(env_id: str) -> Path | None:
    """The folder under ``./environments`` holding ``env_id``'s source (package or flat module), when
    it is not yet on ``sys.path`` (for a package, the folder ``pip install -e`` would install)."""
    found = find_local_env(env_id, Path.cwd() / ENVIRONMENTS_DIR)
    if found is None:
        return None
    root = found.resolve()
    return None if str(root) in sys.path else root


def _install_target(root: Path, env_id: str) -> str:
    """What to ``pip install -e`` for a checkout folder: the package folder itself, or its parent."""
    try:
        rel = root.relative_to(Path.cwd())
    except ValueError:
        rel = root
    return str(rel) if (root / "pyproject.toml").is_file() else f"environments/{module_name(env_id)}"


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
