"""0.1.x path ``verifiers.utils.client_utils``: `setup_client` for an OpenAI-compatible server."""

from __future__ import annotations

import os

from openai import AsyncOpenAI

__all__ = ["setup_client"]


def setup_client(
    api_base_url: str,
    api_key_var: str,
    timeout: float = 600.0,
    max_connections: int = 1000,
    max_keepalive_connections: int = 100,
    max_retries: int = 2,
    extra_headers: dict[str, str] | None = None,
) -> AsyncOpenAI:
    """An ``AsyncOpenAI`` client for ``api_base_url``, its key read from the variable ``api_key_var``.

    Connection limits are set as upstream does, since evaluations open many
    concurrent requests; environments accept this client like any other.
    """
    import httpx2 as httpx  # the SDK (openai>=3) accepts only its own HTTP library's client

    http_client = httpx.AsyncClient(
        limits=httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_keepalive_connections
        ),
        timeout=httpx.Timeout(timeout, connect=5.0),
        headers=extra_headers,
    )
    return AsyncOpenAI(
        base_url=api_base_url,
        api_key=os.getenv(api_key_var, "EMPTY"),
        max_retries=max_retries,
        http_client=http_client,
    )
