"""Finding a taskset package by id and building it from keyword overrides.

Ids resolve as upstream's: ``owner/`` prefix and ``@version`` suffix dropped, ``-`` → ``_``,
lower-cased; the module must export exactly one `Taskset` subclass in ``__all__``.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from pydantic import ValidationError

from verifiers.errors import ConfigError, EnvError
from verifiers.v1.taskset import Taskset


def taskset_module_name(taskset_id: str) -> str:
    name = taskset_id.rsplit("/", 1)[-1].split("@", 1)[0]
    return name.replace("-", "_").lower()


def taskset_class(module: ModuleType) -> type[Taskset] | None:
    """The one `Taskset` subclass `module` exports in ``__all__``; None when it exports none."""
    names = getattr(module, "__all__", None) or []
    found = [
        obj
        for name in names
        if isinstance(obj := getattr(module, name, None), type)
        and issubclass(obj, Taskset)
        and obj is not Taskset
    ]
    if len(found) > 1:
        raise EnvError(
            f"module {module.__name__!r} exports {len(found)} Taskset subclasses "
            f"({', '.join(c.__name__ for c in found)}) in __all__; export exactly one"
        )
    return found[0] if found else None


def import_taskset(taskset_id: str) -> type[Taskset]:
    module_name = taskset_module_name(taskset_id)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise
        raise ConfigError(
            f"taskset {taskset_id!r} not found (no module {module_name!r}); a taskset is an installed "
            "package exporting its Taskset subclass via __all__"
        ) from exc
    cls = taskset_class(module)
    if cls is None:
        raise EnvError(
            f"module {module_name!r} exports no Taskset subclass via __all__ (found {getattr(module, '__all__', None)})"
        )
    return cls


def build_taskset(cls: type[Taskset], taskset_id: str, overrides: dict[str, Any]) -> Taskset:
    """``cls`` with its config built from ``overrides`` (the config's fields; ``task`` takes a
    dict of the task config's fields). A wrong key or value is a `ConfigError` naming it."""
    config_cls = cls.config_type()
    try:
        config = config_cls.model_validate({"id": taskset_id, **overrides})
    except ValidationError as exc:
        raise ConfigError(f"taskset {taskset_id!r}: invalid config override: {exc}") from exc
    return cls(config)


def load_taskset(taskset_id: str, **overrides: Any) -> Taskset:
    return build_taskset(import_taskset(taskset_id), taskset_id, overrides)
