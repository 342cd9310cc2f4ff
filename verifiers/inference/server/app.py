"""The embedded OpenAI-compatible HTTP API (FastAPI) over an `InferenceEngine`.

Endpoints: ``/v1/chat/completions``, ``/v1/completions`` (both with streaming),
``/inference/v1/generate`` (vLLM's token-in endpoint, `generate`), ``/v1/models``, ``/health``, ``/tokenize``, ``/detokenize``, and ``/weights/version`` /
``/weights/reload`` for trainers in another process. Responses follow vLLM's shape,
including ``prompt_token_ids`` and per-choice ``token_ids`` when ``return_token_ids`` is
set, plus a ``weight_version`` field naming the policy version that produced them.

This module is the HTTP side (routing, auth, body limits, disconnects, error bodies); the
request handling itself is `verifiers.inference.server.api.EmbeddedAPI`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from verifiers.errors import ConfigError, OverlongPromptError
from verifiers.inference.engine import InferenceEngine, InvalidRequestError
from verifiers.inference.server.api import EmbeddedAPI, render_chat
from verifiers.inference.server.generate import generate
from verifiers.inference.server.protocol import OpenAIError

__all__ = ["DEFAULT_MAX_REQUEST_BYTES", "BodyLimit", "EmbeddedAPI", "create_app", "render_chat"]

DEFAULT_MAX_REQUEST_BYTES = 2 * 1024 * 1024
"""Largest request body accepted (2 MiB): far above any prompt a 128k-context model can take as JSON
text, far below what it costs to parse, template and tokenize (a 16 MB body took ~45 s and GBs)."""


class _ClientGone(Exception):
    """The client disconnected before its (non-streaming) response was ready."""


async def _disconnected(request: Request) -> None:
    """Return once the client has gone away (the request body has already been read)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _unless_disconnected(request: Request, work: Any) -> Any:
    """Await ``work``, cancelling it if the client disconnects first.

    A client that times out must not leave the engine generating up to ``max_tokens``
    for nobody (vLLM aborts such requests too); cancelling the handler makes the engine
    drop the request between decoding steps. Streaming handlers return at once, and
    the streaming response watches for disconnects itself.
    """
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done() and watcher.exception() is not None:
            return await task  # the connection cannot be watched: just finish the work
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        watcher.cancel()
    if task.done():
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
    raise _ClientGone


class BodyLimit:
    """ASGI middleware: refuse request bodies over ``max_bytes`` with a 413 JSON error.

    A declared ``Content-Length`` over the limit is answered without keeping the body (up to 16x
    the limit it is read and dropped, so a client still sending sees the 413, not a reset); a
    chunked body is counted as it arrives, never kept beyond the limit, and read and dropped up to
    16x the limit before the 413, so memory stays bounded.
    """

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    @staticmethod
    def error(max_bytes: int) -> OpenAIError:
        return OpenAIError(413, f"the request body is larger than this server's limit of {max_bytes} bytes "
                           "(vf-serve --max-request-bytes)")

    def _error(self) -> OpenAIError:
        return self.error(self.max_bytes)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        try:
            too_big = declared is not None and int(declared) > self.max_bytes
        except ValueError:
            too_big = False
        if too_big:
            if int(declared) <= 16 * self.max_bytes:
                # Read and drop the body (constant memory) so the client, still sending, gets the 413
                # instead of a reset connection that it would retry.
                while (await receive()).get("more_body", False):
                    pass
            await JSONResponse(self._error().body(), status_code=413, headers={"connection": "close"})(
                scope, receive, send)
            return
        seen = 0
        started = False

        async def counting_receive() -> Any:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    # As above: drop the rest of a moderately oversized upload before whoever
                    # answers (here or the app's own error handling) sends the 413, so the client
                    # reads it rather than a reset while it is still sending.
                    more = message.get("more_body", False)
                    while more and seen <= 16 * self.max_bytes:
                        message = await receive()
                        seen += len(message.get("body", b""))
                        more = message["type"] == "http.request" and message.get("more_body", False)
                    raise _TooLarge
            return message

        async def tracking_send(message: Any) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except _TooLarge:
            if not started:
                await JSONResponse(self._error().body(), status_code=413, headers={"connection": "close"})(
                    scope, receive, send)


class _TooLarge(Exception):
    pass


def _is_too_large(exc: BaseException) -> bool:
    """`_TooLarge`, possibly inside the exception groups of Starlette's middleware task groups."""
    if isinstance(exc, _TooLarge):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return any(_is_too_large(e) for e in exc.exceptions)
    return False


def create_app(
    engine: InferenceEngine,
    served_model_names: Sequence[str],
    *,
    api_key: str | None = None,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    reload_dir: str | Path | None = None,
) -> FastAPI:
    """The FastAPI application. The engine is started on first use if it is not running.

    ``api_key``: required as ``Authorization: Bearer KEY`` on everything but ``/health``; ``""``
    is refused (it would read as "auth off"). ``max_request_bytes``: larger bodies get a 413.
    ``reload_dir``: ``/weights/reload`` only reads checkpoints under this directory (403 otherwise).
    Every error, the framework's 404/405/422/500 included, is an OpenAI-format JSON body.
    """
    if api_key is not None and not api_key.strip():
        raise ConfigError("the API key is empty; give a non-empty key, or leave it out to serve without one")
    if max_request_bytes < 1:
        raise ConfigError(f"max_request_bytes must be >= 1, got {max_request_bytes}")
    api = EmbeddedAPI(engine, served_model_names, reload_dir=reload_dir)
    app = FastAPI(title="verifiers embedded server", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.api = api
    _add_error_handlers(app)
    _add_routes(app, api, engine)
    app.add_middleware(_Guard, engine=engine, api_key=api_key, max_request_bytes=max_request_bytes)
    app.add_middleware(BodyLimit, max_bytes=max_request_bytes)  # outermost: before anything reads the body
    return app


def _error_response(exc: OpenAIError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status)


def _add_error_handlers(app: FastAPI) -> None:
    """The framework's own errors (404/405/422/500) as OpenAI-format JSON bodies."""

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = exc.detail if isinstance(exc.detail, str) else json.dumps(exc.detail)
        return JSONResponse(OpenAIError(exc.status_code, message).body(), status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        loc = [str(p) for p in (errors[0].get("loc", ()) if errors else ())]
        return _error_response(OpenAIError(422, f"invalid request: {errors[0].get('msg') if errors else exc}",
                                           param=loc[-1] if loc else None))

    @app.exception_handler(Exception)
    async def crashed(request: Request, exc: Exception) -> JSONResponse:
        return _error_response(OpenAIError(500, f"internal server error ({type(exc).__name__}: {exc})"))


class _Guard:
    """ASGI middleware: check the API key, start the engine, and turn any escaped error into JSON.

    Plain ASGI rather than ``@app.middleware("http")``: Starlette's ``BaseHTTPMiddleware`` passes
    every chunk of a streamed body through an extra in-memory channel and task switch, which at
    one chunk per token per stream cost the streaming path more than rendering the chunks.
    """

    def __init__(self, app: Any, engine: InferenceEngine, api_key: str | None, max_request_bytes: int) -> None:
        self.app = app
        self.engine = engine
        self.api_key = api_key
        self.expected = f"Bearer {api_key}".encode() if api_key else b""
        self.max_request_bytes = max_request_bytes

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.api_key and scope.get("path") != "/health":
            given = next((v for k, v in scope.get("headers") or [] if k == b"authorization"), b"")
            if not hmac.compare_digest(given, self.expected):
                await _error_response(OpenAIError(401, "invalid or missing API key"))(scope, receive, send)
                return
        self.engine.start()
        started = False

        async def tracking_send(message: Any) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:
            if started:  # the response is under way: nothing can replace it (the server closes the connection)
                raise
            if isinstance(exc, OpenAIError):
                response = _error_response(exc)
            elif _is_too_large(exc):  # the body went over the limit while a handler read it
                response = JSONResponse(BodyLimit.error(self.max_request_bytes).body(), status_code=413,
                                        headers={"connection": "close"})
            else:  # an unhandled error must still be OpenAI-format JSON
                response = _error_response(OpenAIError(500, f"internal server error ({type(exc).__name__}: {exc})"))
            await response(scope, receive, send)


async def _body_of(request: Request) -> Any:
    raw = await request.body()
    try:
        return json.loads(raw) if len(raw) < 65536 else await asyncio.to_thread(json.loads, raw)
    except Exception:
        raise OpenAIError(400, "the request body is not valid JSON") from None


async def _run(handler: Any, request: Request) -> Any:
    """Run one API handler on the request's JSON body; its errors become OpenAI-format responses."""
    try:
        result = await _unless_disconnected(request, handler(await _body_of(request)))
    except _ClientGone:
        return JSONResponse(OpenAIError(499, "client closed the request").body(), status_code=499)
    except OpenAIError as exc:
        return _error_response(exc)
    except OverlongPromptError as exc:
        return _error_response(OpenAIError(400, str(exc), param="messages"))
    except InvalidRequestError as exc:
        return _error_response(OpenAIError(400, str(exc), param=exc.param))
    except ConfigError as exc:
        return _error_response(OpenAIError(400, str(exc)))
    if isinstance(result, dict):
        return JSONResponse(result, headers={"x-weight-version": str(result.get("weight_version", ""))})
    return StreamingResponse(result, media_type="text/event-stream")


def _add_routes(app: FastAPI, api: EmbeddedAPI, engine: InferenceEngine) -> None:
    """The endpoints, each a thin call into ``api`` (or the engine's weight version)."""

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        return await _run(api.chat, request)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        return await _run(api.completions, request)

    @app.post("/inference/v1/generate")
    async def token_generate(request: Request) -> Any:  # vLLM's token-in endpoint (generate.py)
        return await _run(lambda body: generate(api, body), request)

    @app.get("/v1/models")
    async def models() -> Any:
        return api.models()

    @app.get("/health")
    async def health() -> Any:
        return {"status": "ok", "weight_version": engine.weight_version}

    @app.post("/tokenize")
    async def tokenize(request: Request) -> Any:
        async def h(body: Any) -> Any:
            return await asyncio.to_thread(api.tokenize, body)

        return await _run(h, request)

    @app.post("/detokenize")
    async def detokenize(request: Request) -> Any:
        async def h(body: Any) -> Any:
            return await asyncio.to_thread(api.detokenize, body)

        return await _run(h, request)

    @app.get("/weights/version")
    async def weight_version() -> Any:
        return {"weight_version": engine.weight_version}

    @app.post("/weights/reload")
    async def reload(request: Request) -> Any:
        return await _run(api.reload, request)
