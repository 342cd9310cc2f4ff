"""What `vf-serve` says while it serves: a line per request (opt-in) and a throughput line.

A server that prints nothing after its banner leaves a user unable to tell an idle server
from a stuck one, or a slow client from a slow model. `RequestLog` is an ASGI middleware
that times each request and reads the completion token count from the response's
``usage`` (streams carry it only with ``stream_options.include_usage``); `ThroughputMeter`
prints, every few seconds while there is traffic, the requests finished, tokens generated
per second and requests in flight. Idle periods print nothing, so a log never fills up
with zeros. Both write through a ``print``-like callable so tests and callers choose where.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_COMPLETION_TOKENS = re.compile(rb'"completion_tokens"\s*:\s*(\d+)')
_TAIL_BYTES = 4096  # a usage object is near the end of a body; keep only the tail of long ones


class ThroughputMeter:
    """Counts finished requests and generated tokens; `report` prints one line for a busy window."""

    def __init__(self, emit: Callable[[str], None], every_s: float = 10.0) -> None:
        self.emit = emit
        self.every_s = every_s
        self._lock = threading.Lock()
        self._in_flight = 0
        self._requests = 0
        self._tokens = 0
        self._since = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def started(self) -> None:
        with self._lock:
            self._in_flight += 1

    def finished(self, tokens: int) -> None:
        with self._lock:
            self._in_flight -= 1
            self._requests += 1
            self._tokens += tokens

    def report(self) -> str | None:
        """The line for the window since the last report (None when nothing happened), then reset."""
        now = time.monotonic()
        with self._lock:
            requests, tokens, in_flight = self._requests, self._tokens, self._in_flight
            seconds = max(now - self._since, 1e-9)
            self._requests = self._tokens = 0
            self._since = now
        if not requests and not in_flight:
            return None
        return (f"throughput: {requests} requests, {tokens} tokens generated, {tokens / seconds:.1f} tokens/s "
                f"over {seconds:.0f}s; {in_flight} in flight")

    def start(self) -> ThroughputMeter:
        """Report from a daemon thread every ``every_s`` seconds until `stop`."""

        def loop() -> None:
            while not self._stop.wait(self.every_s):
                line = self.report()
                if line:
                    self.emit(line)

        self._thread = threading.Thread(target=loop, name="vf-serve-throughput", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


class RequestLog:
    """ASGI middleware: per-request line ``METHOD PATH STATUS SECONDS tokens`` and throughput counts."""

    def __init__(self, app: ASGIApp, *, emit: Callable[[str], None] | None, meter: ThroughputMeter | None) -> None:
        self.app = app
        self.emit = emit
        self.meter = meter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500
        tail = b""

        async def watching_send(message: Message) -> None:
            nonlocal status, tail
            if message["type"] == "http.response.start":
                status = int(message["status"])
            elif message["type"] == "http.response.body":
                tail = (tail + bytes(message.get("body", b"")))[-_TAIL_BYTES:]
            await send(message)

        if self.meter is not None:
            self.meter.started()
        tokens = 0
        try:
            await self.app(scope, receive, watching_send)
        finally:
            found = _COMPLETION_TOKENS.findall(tail)
            tokens = int(found[-1]) if found else 0
            if self.meter is not None:
                self.meter.finished(tokens)
            if self.emit is not None:
                self.emit(f"{scope.get('method', '?')} {scope.get('path', '?')} {status} "
                          f"{time.perf_counter() - start:.3f}s {tokens} tokens")
