"""Server and SDK failures turned into our `ModelError` hierarchy, whichever client saw them.

One module for the mapping so that every client adapter (aiohttp fast path, the
SDK, 0.1.x ``create`` wrappers, the embedded runner) raises the same errors for
the same failure, and none of them needs to import another adapter to do so.
"""

from __future__ import annotations

import json

import openai

from verifiers.errors import (
    BadRequestError,
    EmptyResponseError,
    ModelError,
    ModelTimeoutError,
    OverlongPromptError,
    RateLimitError,
    ServerError,
)

OVERLONG_MARKERS = (
    "maximum context length",
    "context length",
    "context_length_exceeded",
    "prompt is too long",
    "too many tokens",
)
"""Phrases servers (vLLM, OpenAI, the embedded server) use when a prompt does not fit the context."""


def error_for_status(status: int, message: str) -> ModelError:
    """Our error for an HTTP error status that is final (after retries), whichever client saw it.

    The status is kept as ``status_code`` so a proxy (the interception gateway) can relay it.
    """
    err: ModelError
    if status == 429:
        err = RateLimitError(message)
    elif status >= 500:
        err = ServerError(message)
    elif status in (400, 413, 422) and any(m in message.lower() for m in OVERLONG_MARKERS):
        err = OverlongPromptError(message)
    else:
        err = BadRequestError(message)
    err.status_code = status  # type: ignore[attr-defined]
    return err


def _causes(exc: BaseException) -> list[BaseException]:
    chain, seen = [], set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        chain.append(cur)
        cur = cur.__cause__ or cur.__context__
    return chain


def _caused_by_connection_failure(exc: BaseException) -> bool:
    """The aiohttp transport reports a refused or dropped connection as a connect *timeout*."""
    import aiohttp

    for c in _causes(exc)[1:]:
        if isinstance(c, (aiohttp.ClientConnectorError, aiohttp.ServerDisconnectedError, ConnectionError)):
            return True
    return False


def _root_message(exc: BaseException) -> str:
    root = _causes(exc)[-1]
    return f"{type(root).__name__}: {root}"


def map_openai_error(exc: BaseException) -> ModelError:
    """Translate an openai SDK exception into our hierarchy (after the SDK's own retries)."""
    if isinstance(exc, ModelError):
        return exc
    msg = str(exc)
    if isinstance(exc, openai.APITimeoutError):
        if _caused_by_connection_failure(exc):
            return ServerError(f"connection error: {_root_message(exc)}")
        return ModelTimeoutError(msg or "request timed out")
    if isinstance(exc, openai.APIConnectionError):
        return ServerError(f"connection error: {msg}")
    if isinstance(exc, openai.APIStatusError):
        return error_for_status(exc.status_code, msg)
    if isinstance(exc, (json.JSONDecodeError, UnicodeDecodeError)):
        return EmptyResponseError(f"unparseable response body: {msg}")
    return ModelError(f"{type(exc).__name__}: {msg}")
