"""vf-serve's HTTP connections: idle and slow clients cannot hold the server.

uvicorn counts open connections against ``--limit-concurrency`` and answers 503 beyond it, but
a connection that never sends a request has no timeout: about a thousand sockets that send
nothing keep every other client, ``/health`` included, at 503 for as long as they stay open.
`guarded_h11_protocol` builds uvicorn's h11 protocol with three rules on top:

* a **header timeout**: a connection must complete a request's headers within
  ``header_timeout_s`` of opening (or of its previous response); otherwise it is closed;
* a **body timeout**: a request's body must arrive within ``body_timeout_s`` of its headers
  (a client trickling its body is closed, and the handler sees a disconnect);
* a **per-client cap**: one client address may hold at most ``per_client`` connections; a new
  one beyond that closes that client's oldest idle connection (or, when all are busy, itself);
* a **reserve**: when a new connection brings the server within ``reserve`` of
  ``limit_concurrency``, the oldest connection that is not in the middle of a request is closed,
  so a request that arrives still finds room.

Once a request's body has arrived, its connection is never closed by these rules (a long
generation is not "slow"); uvicorn's own keep-alive timeout still applies between requests.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["ConnectionGuard", "guarded_h11_protocol"]


class ConnectionGuard:
    """The shared state of one server's connections: per-client counts and open connections in order."""

    def __init__(self, *, header_timeout_s: float, per_client: int, limit: int, reserve: int,
                 body_timeout_s: float = 60.0) -> None:
        self.header_timeout_s = header_timeout_s
        self.body_timeout_s = body_timeout_s
        self.per_client = per_client
        self.limit = limit
        self.reserve = reserve
        self.by_client: Counter[str] = Counter()
        self.open: dict[Any, None] = {}  # insertion-ordered: the oldest first
        self.dropped = Counter[str]()  # why: "header_timeout", "body_timeout", "per_client", "reserve"


def _evict_oldest_idle(guard: ConnectionGuard, keep: Any, why: str, host: str | None = None) -> bool:
    """Close the oldest connection (of ``host``, if given) with no request in flight; False if none."""
    for conn in guard.open:
        if conn is keep or (host is not None and conn.host != host):
            continue
        if not conn.in_request() and not conn.transport.is_closing():
            conn.drop(why)
            return True
    return False


def guarded_h11_protocol(guard: ConnectionGuard) -> type[H11Protocol]:
    """uvicorn's ``http=`` protocol class enforcing ``guard``'s rules (one class per server)."""

    class GuardedH11Protocol(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None
        _body_deadline: asyncio.TimerHandle | None = None
        _body_cycle: Any = None
        host = ""

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self.host = self.client[0] if self.client else ""
            guard.by_client[self.host] += 1
            guard.open[self] = None
            # The newest connection wins: idle ones make room for it, oldest first.
            if guard.by_client[self.host] > guard.per_client and not _evict_oldest_idle(
                guard, self, "per_client", self.host
            ):
                self.drop("per_client")
                return
            if len(guard.open) >= guard.limit - guard.reserve:
                _evict_oldest_idle(guard, self, "reserve")
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            self._end_body_deadline()
            if guard.open.pop(self, False) is None:
                guard.by_client[self.host] -= 1
                if guard.by_client[self.host] <= 0:
                    del guard.by_client[self.host]
            super().connection_lost(exc)

        def handle_events(self) -> None:
            super().handle_events()
            if self.in_request():
                self._disarm()
                self._watch_body()

        def _watch_body(self) -> None:
            """A request body must arrive within ``body_timeout_s`` of its headers (slow senders)."""
            if not self.cycle.more_body:
                self._end_body_deadline()
            elif self._body_cycle is not self.cycle:
                self._end_body_deadline()
                self._body_cycle = self.cycle
                self._body_deadline = self.loop.call_later(guard.body_timeout_s, self._body_late, self.cycle)

        def _body_late(self, cycle: Any) -> None:
            if cycle is self.cycle and cycle.more_body and not self.transport.is_closing():
                guard.dropped["body_timeout"] += 1
                self.transport.close()  # the app's receive() gets http.disconnect

        def _end_body_deadline(self) -> None:
            if self._body_deadline is not None:
                self._body_deadline.cancel()
                self._body_deadline = None

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()

        def in_request(self) -> bool:
            return self.cycle is not None and not self.cycle.response_complete

        def drop(self, why: str) -> None:
            if self.in_request() or self.transport.is_closing():
                return
            guard.dropped[why] += 1
            self.transport.close()

        def _arm(self) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(guard.header_timeout_s, self.drop, "header_timeout")

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

    return GuardedH11Protocol
