"""Running the async client stack from sync code (``env.evaluate(...)``, ``vf.run_python``).

An ``AsyncOpenAI`` client's connection pool belongs to the event loop that first
used it, so a sync call that spins up its own loop must not reuse that pool. This
module owns the loop for such calls; the client adapters read `_EPHEMERAL_CLIENTS`
to learn that they are inside one.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections.abc import Awaitable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from verifiers.clients.aiohttp_client import close_sessions_of_this_loop

if TYPE_CHECKING:
    import openai

T = TypeVar("T")

# Set by `run_in_fresh_loop`: clients copied for that loop, closed when it ends.
_EPHEMERAL_CLIENTS: contextvars.ContextVar[list[openai.AsyncOpenAI] | None] = contextvars.ContextVar(
    "vf_ephemeral_clients", default=None
)


async def run_in_fresh_loop(coro: Awaitable[T]) -> T:
    """Run ``coro`` in a loop that will be closed afterwards (the sync ``evaluate``/``generate`` path).

    An ``AsyncOpenAI`` client's connection pool belongs to the event loop that
    first used it. Inside this wrapper every client is used through a copy bound
    to this loop and closed at the end, so users can call ``env.evaluate(client, ...)``
    repeatedly with the same client.
    """
    created: list[openai.AsyncOpenAI] = []
    token = _EPHEMERAL_CLIENTS.set(created)
    try:
        return await coro
    finally:
        _EPHEMERAL_CLIENTS.reset(token)
        await close_sessions_of_this_loop()
        for c in created:
            with contextlib.suppress(Exception):
                await c.close()


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine from sync code, also inside a running loop (notebooks): then in a helper thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(run_in_fresh_loop(coro))
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(run_in_fresh_loop(coro))
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    t = threading.Thread(target=target, name="verifiers-run-sync")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]
