"""The v1 decorators (`reward`, `metric`, `stop`, `tool`) and how tagged hooks are found and called.

A decorator only tags the function with attributes; nothing is registered at import time, so a
taskset module can be imported (for discovery, for tests) without side effects. Whoever runs the
hooks finds them on the instance (`discover`) and calls them with the arguments they ask for by
parameter name, or by annotated type (`invoke`), the way verifiers 0.4's v1 layer does: a hook
declares ``trace``, ``task`` or ``runtime`` and receives just those.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, get_origin, get_type_hints

F = TypeVar("F", bound=Callable[..., Any])

HOOK_KINDS = ("reward", "metric", "stop", "tool")
AWAITED = ("reward", "metric", "stop")
"""Hooks upstream awaits (``asyncio.gather`` over them); a ``@vf.tool`` may be a plain def."""


def _mark(kind: str, func: F | None, **extra: Any) -> F | Callable[[F], F]:
    """Tag `func` (or return a tagger) with ``kind`` and its options; works bare and called."""

    def decorator(f: F) -> F:
        if kind in AWAITED and not inspect.iscoroutinefunction(f):
            raise TypeError(f"@vf.{kind} {f.__qualname__} must be `async def`: verifiers v1 awaits every {kind} "
                            "hook, so a plain def fails there at scoring time (written here, it must run there)")
        setattr(f, f"_vf_{kind}", True)
        for key, value in extra.items():
            setattr(f, f"_vf_{key}", value)
        return f

    return decorator if func is None else decorator(func)


def reward(func: F | None = None, weight: float = 1.0, priority: int = 0) -> Any:
    """A weighted task reward ``(trace, task, ...) -> float | Mapping[str, float]``.

    The rollout's reward is the sum of ``score * weight`` over every reward. A mapping gives one
    named reward per key, each with this decorator's weight.
    """
    return _mark("reward", func, weight=float(weight), priority=priority)


def metric(func: F | None = None, priority: int = 0) -> Any:
    """A recorded, unweighted task metric ``(trace, task, ...) -> float | Mapping[str, float]``."""
    return _mark("metric", func, priority=priority)


def stop(func: F | None = None, priority: int = 0) -> Any:
    """A predicate over the `Trace` that ends the rollout when it returns True.

    Checked before every model turn and after it; the first one that fires names the trace's
    ``stop_condition`` (the function's name).
    """
    return _mark("stop", func, priority=priority)


def tool(func: F | None = None, name: str | None = None) -> Any:
    """Expose a `Toolset` method to the model. The docstring is the tool's description."""
    return _mark("tool", func, tool_name=name)


def is_hook(fn: Any, kind: str) -> bool:
    return callable(fn) and getattr(fn, f"_vf_{kind}", False) is True


def hook_option(fn: Any, key: str, default: Any = None) -> Any:
    return getattr(fn, f"_vf_{key}", default)


def discover(obj: object, kind: str) -> list[Callable[..., Any]]:
    """The bound methods of `obj` tagged ``kind``, highest priority first, then by name.

    Walks the class MRO (not ``dir(obj)``, which would evaluate properties) and binds through
    ``getattr`` so the most derived definition wins; an undecorated override of a decorated
    method therefore switches the hook off, as it does upstream.
    """
    names = {name for klass in type(obj).__mro__ for name, fn in vars(klass).items() if is_hook(fn, kind)}
    methods = [m for name in names if is_hook(m := getattr(obj, name), kind)]
    methods.sort(key=lambda m: (-int(hook_option(m, "priority", 0) or 0), m.__name__))
    return methods


def invoke(fn: Callable[..., Any], available: dict[Any, Any]) -> Any:
    """Call `fn` with the entries of `available` its parameters ask for.

    String keys match parameter names; type keys match a parameter's annotation (so a stop hook
    ``def done(self, t: vf.Trace)`` gets the trace whatever the parameter is called). A parameter
    nothing matches keeps its default, and a required one raises the usual TypeError.
    """
    params = inspect.signature(fn).parameters
    kwargs = {name: available[name] for name in params if name in available}
    if any(isinstance(key, type) for key in available):
        try:
            hints = get_type_hints(fn)
        except Exception:  # unresolvable annotations: fall back to names only
            hints = {}
        for name in params:
            hint = hints.get(name)
            kind = get_origin(hint) or hint
            if name not in kwargs and isinstance(kind, type) and kind in available:
                kwargs[name] = available[kind]
    return fn(**kwargs)


async def call(fn: Callable[..., Any], available: dict[Any, Any]) -> Any:
    """`invoke`, awaiting the result when the hook is async."""
    result = invoke(fn, available)
    return await result if inspect.isawaitable(result) else result


def names(fns: Iterable[Callable[..., Any]]) -> list[str]:
    return [fn.__name__ for fn in fns]
