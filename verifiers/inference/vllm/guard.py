"""The key in front of every route of a vLLM server `vf-vllm` starts, not only ``/v1``.

vLLM's own ``--api-key`` guards only paths under ``/v1`` (and a few other API prefixes). The
dev-mode routes RL needs (``/collective_rpc``, ``/pause``, ``/resume``, ``/sleep``,
``/update_weights``, ``/reset_prefix_cache``, ...) and ``/server_info``, ``/metrics`` and
``/docs`` stay open to anyone who can reach the port: a caller could load other weights into
the policy being trained, or stop the server. `vf-vllm --api-key` therefore also passes vLLM's
own ``--middleware`` option this class, which answers 401 to any request without the key except
``GET /health`` (what load balancers and `VLLMServer.start` poll). The key reaches the server
process through the environment (``VF_VLLM_ROUTE_KEY``), because vLLM constructs middleware
classes without arguments.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

KEY_ENV = "VF_VLLM_ROUTE_KEY"
OPEN_PATHS = frozenset({"/health"})
MIDDLEWARE_PATH = "verifiers.inference.vllm.guard.RouteKeyMiddleware"
"""What `vf-vllm` passes to vLLM's ``--middleware`` (an import path; vLLM adds the class to its app)."""

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]]

_UNAUTHORIZED = b'{"error": "Unauthorized: this vLLM server (vf-vllm --api-key) needs the key on every route"}'


class RouteKeyMiddleware:
    """Pure ASGI middleware: ``Authorization: Bearer <key>`` on every path but `OPEN_PATHS`."""

    def __init__(self, app: ASGIApp) -> None:
        key = os.environ.get(KEY_ENV, "")
        if not key:
            raise RuntimeError(f"{KEY_ENV} is not set: RouteKeyMiddleware has no key to check (vf-vllm sets it)")
        self.app = app
        self._digest = hashlib.sha256(key.encode()).digest()

    def _authorized(self, scope: Scope) -> bool:
        for name, value in scope.get("headers", []):
            if name.lower() == b"authorization":
                scheme, _, token = value.decode("latin-1").partition(" ")
                if scheme.lower() == "bearer":
                    return hmac.compare_digest(hashlib.sha256(token.strip().encode()).digest(), self._digest)
        return False

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Message]],
                       send: Callable[[Message], Awaitable[None]]) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket") or self._authorized(scope):
            await self.app(scope, receive, send)
            return
        if kind == "http" and scope["path"] in OPEN_PATHS and scope.get("method") in ("GET", "HEAD"):
            await self.app(scope, receive, send)
            return
        if kind == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]})
        await send({"type": "http.response.body", "body": _UNAUTHORIZED})
