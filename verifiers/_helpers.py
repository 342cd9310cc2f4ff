"""Small helpers the core shares: awaiting plain-or-async results, naming callables, 0.1.x kwargs.

They live here rather than in `verifiers.utils` because that package is the 0.1.x
import-path layer, which sits above the core; `verifiers.utils` and
`verifiers.compat.env_adapters` re-export these same functions.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

logger = logging.getLogger(__name__)
T = TypeVar("T")


async def maybe_await(value: T | Awaitable[T]) -> T:
    """Let hooks and reward functions be plain or ``async`` functions.

    Takes the *result* of a call. The 0.1.x helper of the same name, which takes the
    function and its arguments, is `verifiers.utils.async_utils.maybe_await`.
    """
    if inspect.isawaitable(value):
        return await value
    return value  # type: ignore[return-value]


def callable_name(fn: Callable[..., Any]) -> str:
    """The name a tool or reward function is registered under (its ``__name__``, else its class name)."""
    return getattr(fn, "__name__", None) or type(fn).__name__


def set_legacy_attributes(obj: Any, kwargs: Mapping[str, Any]) -> None:
    """Set each keyword as an attribute of ``obj``, skipping (with a warning) those that shadow one.

    0.1.x ``Environment(**kwargs)``/``Rubric(**kwargs)`` stored every extra keyword as an
    attribute, and environments read them back (``self.judge_model``...). We do the same,
    but never let such a keyword overwrite one of our own attributes or methods.
    """
    shadowing = []
    for name, value in kwargs.items():
        if hasattr(obj, name):
            shadowing.append(name)
            continue
        setattr(obj, name, value)
    if shadowing:
        logger.warning(
            "%s: keyword argument(s) %s not stored as attributes: the names are already taken by %s's own "
            "attributes or methods",
            type(obj).__name__,
            sorted(shadowing),
            type(obj).__name__,
        )
