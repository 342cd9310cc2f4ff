"""Small helpers shared across modules."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


async def maybe_await(value: T | Awaitable[T]) -> T:
    """Let hooks and reward functions be plain or ``async`` functions."""
    if inspect.isawaitable(value):
        return await value
    return value  # type: ignore[return-value]


def callable_name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__name__", None) or type(fn).__name__
