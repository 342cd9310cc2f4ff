"""Small helpers shared across modules, and the verifiers 0.1.x ``verifiers.utils.*`` paths.

This package's own namespace holds the two internal helpers the core uses
(`maybe_await` on a *value*, `callable_name`). The 0.1.x helper modules that
published environments import (``verifiers.utils.data_utils``,
``verifiers.utils.async_utils``, ``verifiers.utils.tools``, ...) are submodules;
they are thin layers over the core and are only imported when asked for.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["callable_name", "maybe_await"]


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
