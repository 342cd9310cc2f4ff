"""An event loop in a daemon thread, for async resources that outlive one caller's event loop.

Why: an MCP stdio connection is an anyio context manager that must be entered and left in
the same task, while rollouts run in many tasks and often in several event loops one after
another (``env.evaluate`` runs ``asyncio.run`` per call, pytest-asyncio a loop per test).
Keeping the connections in one loop of their own makes them usable from any caller loop
(`run`) and closable from plain sync code (`run_sync`: ``close()``, a finalizer, atexit).
The thread is a daemon so that it can never keep the interpreter alive; atexit handlers
(which run before daemon threads are stopped) close what it holds.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class BackgroundLoop:
    """Runs coroutines on a private event loop in a daemon thread, started on first use."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._guard = threading.Lock()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _ensure(self) -> asyncio.AbstractEventLoop:
        with self._guard:
            if self._loop is None or not self.running:
                loop = asyncio.new_event_loop()
                ready = threading.Event()
                thread = threading.Thread(target=self._serve, args=(loop, ready), name=self.name, daemon=True)
                thread.start()
                ready.wait()
                self._loop, self._thread = loop, thread
            return self._loop

    @staticmethod
    def _serve(loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(ready.set)
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` run on the background loop. Cancelling the caller cancels it there too."""
        future = asyncio.run_coroutine_threadsafe(coro, self._ensure())
        return await asyncio.wrap_future(future)

    def run_sync(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """Block until ``coro`` finished on the background loop (for sync callers, never from that loop)."""
        if self._thread is threading.current_thread():
            coro.close()
            raise RuntimeError(f"{self.name}: run_sync called from its own loop (it would wait on itself)")
        return asyncio.run_coroutine_threadsafe(coro, self._ensure()).result(timeout_s)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the loop and wait for its thread; a later `run` starts a fresh one."""
        with self._guard:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None or not thread.is_alive():
            return
        loop.call_soon_threadsafe(loop.stop)
        if thread is not threading.current_thread():
            thread.join(timeout_s)
