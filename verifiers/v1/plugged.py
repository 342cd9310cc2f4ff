"""Functions plugged into a task by config (``TaskConfig.rewards`` and friends).

Lets a run swap or add a scoring function without editing the taskset package, as upstream's
``--env.taskset.task.rewards.<name>.fn`` does.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

from verifiers.errors import ConfigError
from verifiers.v1.configs import DecoratedFunctionConfig, RewardFunctionConfig
from verifiers.v1.decorators import hook_option


def import_function(ref: str) -> Callable[..., Any]:
    """``pkg.mod:fn``, ``pkg.mod.fn`` or ``path/to/file.py:fn``."""
    module_ref, sep, attr = ref.rpartition(":") if ":" in ref else ref.rpartition(".")
    if not sep or not module_ref or not attr:
        raise ConfigError(f"cannot import {ref!r}: write it as pkg.module:function or file.py:function")
    if module_ref.endswith(".py"):
        path = Path(module_ref)
        spec = importlib.util.spec_from_file_location(f"_vf_plugged_{path.stem}", path)
        if spec is None or spec.loader is None:
            raise ConfigError(f"cannot import {ref!r}: no file {path}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(module_ref)
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ConfigError(f"{ref!r} names no function")
    return fn


def plugged_hook(
    name: str, spec: DecoratedFunctionConfig, kind: str, decorated: Callable[..., Any] | None
) -> Callable[..., Any]:
    """The hook for one config entry, named ``name`` and tagged like its decorated equivalent."""
    if spec.fn:
        fn = import_function(spec.fn)
    elif decorated is not None:
        fn = decorated
    else:
        raise ConfigError(f"{kind} {name!r} plugs no `fn` and the task has no @vf.{kind} method {name!r}")

    @functools.wraps(fn)
    def plugged(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    plugged.__name__ = name
    setattr(plugged, f"_vf_{kind}", True)
    priority = spec.priority if spec.priority is not None else hook_option(fn, "priority", 0)
    plugged._vf_priority = priority  # type: ignore[attr-defined]
    if isinstance(spec, RewardFunctionConfig):
        weight = spec.weight if spec.weight is not None else hook_option(fn, "weight", 1.0)
        plugged._vf_weight = float(weight)  # type: ignore[attr-defined]
    return plugged
