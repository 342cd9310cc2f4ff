"""0.1.x path ``verifiers.utils.async_utils``: call a function that may or may not be async."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["maybe_await"]


async def maybe_await(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call ``func(*args, **kwargs)`` and await the result if it is awaitable (0.1.x signature).

    Environments written for 0.1.x call this from their own hooks, e.g.
    ``await maybe_await(tool, **args)``, so one code path serves sync and async tools.
    """
    result = func(*args, **kwargs)
    if inspect.isawaitable(result):
        return await result
    return result
