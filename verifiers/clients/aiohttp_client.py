"""Fast path: POST straight to an OpenAI-compatible server with aiohttp.

Profiling the rollout engine showed that about three quarters of client CPU per
request went into the openai SDK's request pipeline (building httpx request
objects, copying options, then translating them into aiohttp calls), not into
the network or our code. On a 2-core machine that CPU is what limits rollouts/s
and keeps a wave of 256 concurrent replies from being answered in time.

`AiohttpChatClient` keeps the SDK's observable behaviour — same URL, auth and
default headers, same retry policy (408/409/429/5xx and connection errors,
exponential backoff from 0.5 s to 8 s with jitter, ``retry-after(-ms)``
honoured), same error classes after mapping — but sends each request with one
aiohttp call. `as_chat_client` uses it for any ``AsyncOpenAI`` built on the
aiohttp transport (what `make_client` returns); other clients go through the SDK.
"""

from __future__ import annotations

import asyncio
import json
import random
import weakref
from typing import Any

import aiohttp

from verifiers.clients.base import RequestAdapter
from verifiers.clients.errors import error_for_status
from verifiers.errors import (
    EmptyResponseError,
    ModelError,
    ModelTimeoutError,
    ServerError,
)

INITIAL_RETRY_DELAY_S = 0.5
MAX_RETRY_DELAY_S = 8.0
_RETRY_STATUSES = {408, 409, 429}


def _error_message(status: int, raw: bytes) -> str:
    try:
        data = json.loads(raw)
        err = data.get("error", data) if isinstance(data, dict) else data
        msg = err.get("message") if isinstance(err, dict) else None
        return f"Error code: {status} - {msg or str(data)[:500]}"
    except (ValueError, UnicodeDecodeError):
        return f"Error code: {status} - {raw[:500].decode('utf-8', 'replace')}"


def status_error(status: int, raw: bytes) -> ModelError:
    """The error for a non-2xx response that will not be retried (again)."""
    return error_for_status(status, _error_message(status, raw))


def retry_delay(attempt: int, headers: Any = None) -> float:
    """Seconds to wait before retry number ``attempt`` (0-based): server hint, else backoff with jitter."""
    if headers is not None:
        for key, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
            value = headers.get(key)
            if value is not None:
                try:
                    hinted = float(value) * scale
                except ValueError:
                    continue
                if 0 <= hinted <= 60:
                    return hinted
    delay = min(INITIAL_RETRY_DELAY_S * 2.0**attempt, MAX_RETRY_DELAY_S)
    return delay * (1 - 0.25 * random.random())


class AiohttpChatClient(RequestAdapter):
    """`ChatClient` posting with aiohttp; one connection pool per event loop."""

    any_loop = True
    """Usable from any event loop (a pool per loop): the interception gateway calls it from its own."""

    def __init__(
        self,
        base_url: str,
        headers: dict[str, str] | None = None,
        *,
        timeout: float = 600.0,
        max_retries: int = 3,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.headers = {"Content-Type": "application/json", "Accept": "application/json", **(headers or {})}
        self.timeout = timeout
        self.max_retries = max_retries
        self._sessions: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, aiohttp.ClientSession] = (
            weakref.WeakKeyDictionary()
        )
        self._in_flight: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, int] = weakref.WeakKeyDictionary()

    @classmethod
    def from_openai(cls, client: Any) -> AiohttpChatClient:
        """Same endpoint, auth, headers, timeout and retry budget as an ``openai.AsyncOpenAI``."""
        headers = {k: v for k, v in {**client.default_headers, **client.auth_headers}.items() if isinstance(v, str)}
        timeout = client.timeout
        if not isinstance(timeout, (int, float)):
            timeout = getattr(timeout, "read", None) or 600.0
        return cls(str(client.base_url), headers, timeout=float(timeout), max_retries=client.max_retries)

    def _session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        session = self._sessions.get(loop)
        if session is None or session.closed:
            connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=30)
            session = aiohttp.ClientSession(connector=connector, headers=self.headers)
            self._sessions[loop] = session
            _register_for_close(session)
        return session

    async def release_loop_session(self) -> None:
        """Close this event loop's connection pool (the engine calls it when a run ends, so an
        ``asyncio.run`` per evaluation leaves no open sockets behind)."""
        loop = asyncio.get_running_loop()
        if self._in_flight.get(loop, 0) > 0:
            return  # another run on this loop still uses the pool
        session = self._sessions.pop(loop, None)
        if session is not None and not session.closed:
            await session.close()

    def __del__(self) -> None:
        """Close pools left open when the adapter goes away (with the user's ``AsyncOpenAI``),
        as the SDK's own default client does in its ``__del__``: no unclosed-session warnings."""
        for session in list(getattr(self, "_sessions", {}).values()):
            if session.closed:
                continue
            loop = session._loop
            try:
                if loop.is_running():
                    loop.create_task(session.close())
                else:  # closes the sockets now; the loop that owned them is gone or idle
                    session.connector._close()  # type: ignore[union-attr]
            except Exception:
                pass

    async def close(self) -> None:
        for session in list(self._sessions.values()):
            await session.close()
        self._sessions.clear()

    async def _post(self, path: str, body: dict[str, Any], timeout: float | None) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        self._in_flight[loop] = self._in_flight.get(loop, 0) + 1
        try:
            return await self._post_with_retries(path, body, timeout)
        finally:
            self._in_flight[loop] -= 1

    async def _post_with_retries(self, path: str, body: dict[str, Any], timeout: float | None) -> dict[str, Any]:
        url = self.base_url + path
        data = json.dumps(body).encode()
        limit = aiohttp.ClientTimeout(total=timeout if timeout is not None else self.timeout)
        session = self._session()
        attempt = 0
        while True:
            try:
                async with session.post(url, data=data, timeout=limit) as resp:
                    raw = await resp.read()
                    status, headers = resp.status, resp.headers
            except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
                if attempt < self.max_retries:
                    await asyncio.sleep(retry_delay(attempt))
                    attempt += 1
                    continue
                raise ServerError(f"connection error: {type(exc).__name__}: {exc}") from exc
            except TimeoutError as exc:
                if attempt < self.max_retries:
                    await asyncio.sleep(retry_delay(attempt))
                    attempt += 1
                    continue
                raise ModelTimeoutError(f"request to {url} timed out after {limit.total:g}s") from exc
            if status < 300:
                try:
                    return json.loads(raw)
                except ValueError as exc:
                    raise EmptyResponseError(f"unparseable response body: {raw[:200]!r}") from exc
            should_retry = headers.get("x-should-retry")
            retryable = status in _RETRY_STATUSES or status >= 500
            if should_retry is not None:
                retryable = should_retry == "true"
            if retryable and attempt < self.max_retries:
                await asyncio.sleep(retry_delay(attempt, headers))
                attempt += 1
                continue
            raise status_error(status, raw)


# Sessions opened inside `run_in_fresh_loop` are closed when that loop's work ends.
_OPEN_SESSIONS: weakref.WeakSet[aiohttp.ClientSession] = weakref.WeakSet()


def _register_for_close(session: aiohttp.ClientSession) -> None:
    _OPEN_SESSIONS.add(session)


async def close_sessions_of_this_loop() -> None:
    loop = asyncio.get_running_loop()
    for session in list(_OPEN_SESSIONS):
        if not session.closed and session._loop is loop:
            await session.close()
