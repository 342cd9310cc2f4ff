"""The interception gateway: an OpenAI- and Anthropic-compatible endpoint per rollout, on 127.0.0.1.

An agent program is pointed at ``OPENAI_BASE_URL=http://127.0.0.1:<port>/s/<id>/v1`` with
``OPENAI_API_KEY=<secret>`` (and ``ANTHROPIC_BASE_URL``, ``ANTHROPIC_API_KEY``); every model
call it makes (chat completions, the Responses API or Anthropic Messages, see
`verifiers.gateway.dialects`) is answered by the environment's own client as one chat call
and recorded with its token ids. One gateway serves every session of the process,
from a daemon thread with its own event loop, so a busy rollout loop never delays a
program's HTTP answer and a forgotten gateway dies with the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import os
import shutil
import tempfile
import threading
import weakref
from collections import OrderedDict
from typing import Any

from aiohttp import web

from verifiers.gateway.dialects import DialectError
from verifiers.gateway.dialects import anthropic as messages_api
from verifiers.gateway.dialects import responses as responses_api
from verifiers.gateway.records import GatewayCall, SessionLimits
from verifiers.gateway.session import Reply, Session, TokenPrompt
from verifiers.gateway.validate import (
    MAX_BODY_BYTES,
    BodyError,
    check_chat,
    check_sampling,
    parse_body,
)
from verifiers.gateway.wire import error_body, models_json, sse_events, sse_response
from verifiers.tools.background_loop import BackgroundLoop
from verifiers.types import SamplingArgs

HOST = "127.0.0.1"
MAX_CLOSED_IDS = 100_000
_OTHER_ROUTES = {"completions": "legacy text completions"}
_SERVED = ("POST /chat/completions, POST /responses (GET and DELETE /responses/<id>), POST /messages "
           "(Anthropic), GET /models")


def _unreadable(exc: Exception) -> str:
    return f"the request body has a field of an unexpected shape ({type(exc).__name__}: {str(exc)[:200]})"


def _json(status: int, payload: dict[str, Any]) -> web.Response:
    return web.json_response(payload, status=status, dumps=lambda o: json.dumps(o, ensure_ascii=False))


class InterceptionGateway:
    """Serves sessions; `open_session` is called from the rollout's event loop."""

    def __init__(self) -> None:
        self._sessions: dict[str, Session] = {}
        self._closed: OrderedDict[str, None] = OrderedDict()  # recent closed ids, for a clear 409
        self._loop = BackgroundLoop("vf-gateway")  # its own thread: a busy rollout loop never delays an answer
        self._runner: web.AppRunner | None = None
        self._port: int | None = None
        self._lock = threading.Lock()
        self._unix_dir = ""
        self._unix_dir_cleanup: weakref.finalize | None = None

    # -- lifecycle
    def start(self) -> InterceptionGateway:
        """Listen (on first call); returns once the sockets accept connections."""
        with self._lock:
            if self._runner is None:
                self._runner = self._loop.run_sync(self._listen(), timeout_s=60)
        return self

    def stop(self) -> None:
        """Close every connection and the sockets; a later `start` listens afresh."""
        with self._lock:
            runner, self._runner = self._runner, None
            if runner is None:
                return
            with contextlib.suppress(Exception):
                self._loop.run_sync(runner.cleanup(), timeout_s=10)
            self._loop.stop()
            if self._unix_dir_cleanup is not None:
                self._unix_dir_cleanup()
            self._port = None

    async def _listen(self) -> web.AppRunner:
        runner = web.AppRunner(self._app(), access_log=None, handle_signals=False)
        await runner.setup()
        try:
            await web.TCPSite(runner, HOST, 0).start()
            self._port = runner.addresses[0][1]
            # The same app on a filesystem socket: a program in its own network namespace reaches
            # the gateway through it (a relay inside the namespace), and through nothing else.
            self._unix_dir = tempfile.mkdtemp(prefix="vf-gateway-")
            # Also at interpreter exit: the process-wide gateway is seldom stopped by hand.
            self._unix_dir_cleanup = weakref.finalize(self, shutil.rmtree, self._unix_dir, ignore_errors=True)
            await web.UnixSite(runner, os.path.join(self._unix_dir, "gateway.sock")).start()
        except BaseException:
            await runner.cleanup()
            raise
        return runner

    @property
    def url(self) -> str:
        if self._port is None:
            raise RuntimeError("the gateway is not running; call start() first")
        return f"http://{HOST}:{self._port}"

    @property
    def unix_path(self) -> str:
        """The gateway's filesystem socket (same routes as the TCP port)."""
        if self._port is None:
            raise RuntimeError("the gateway is not running; call start() first")
        return os.path.join(self._unix_dir, "gateway.sock")

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the gateway is not running; call start() first")
        return self._port

    # -- sessions
    def open_session(
        self,
        client: Any,
        model: str,
        sampling_args: SamplingArgs | None = None,
        limits: SessionLimits | None = None,
        *,
        token_prompt: TokenPrompt | None = None,
    ) -> Session:
        """A new session whose upstream calls run on the calling thread's running event loop."""
        from verifiers.clients.openai_client import as_chat_client

        self.start()
        session = Session(
            self.url,
            as_chat_client(client),
            model,
            sampling_args,
            limits or SessionLimits(),
            asyncio.get_running_loop(),
            token_prompt,
        )
        self._sessions[session.id] = session
        return session

    def close_session(self, session: Session) -> None:
        """Later requests of this session answer 409, its upstream calls still running are cancelled;
        its record stays on the `Session` object."""
        session.closed = True
        session.cancel_upstream()
        self._sessions.pop(session.id, None)
        self._closed[session.id] = None
        while len(self._closed) > MAX_CLOSED_IDS:  # a long run closes millions; older ids answer 404
            self._closed.popitem(last=False)

    # -- HTTP
    def _app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_post("/s/{sid}/v1/chat/completions", self._chat)
        app.router.add_post("/s/{sid}/v1/responses", self._responses)
        app.router.add_get("/s/{sid}/v1/responses/{rid}", self._stored_response)
        app.router.add_delete("/s/{sid}/v1/responses/{rid}", self._stored_response)
        app.router.add_post("/s/{sid}/v1/messages", self._messages)
        app.router.add_get("/s/{sid}/v1/models", self._models)
        app.router.add_get("/s/{sid}/v1/models/{model:.+}", self._models)
        app.router.add_route("*", "/s/{sid}/v1/messages/{rest:.*}", self._unsupported_anthropic)
        app.router.add_route("*", "/s/{sid}/v1/{rest:.*}", self._unsupported)
        app.router.add_route("*", "/{rest:.*}", self._no_session)
        return app

    def _session(self, request: web.Request, anthropic: bool = False) -> Session | web.Response:
        """The request's session, or the error to answer (in the Messages API's shape for ``anthropic``)."""

        def fail(status: int, message: str, kind: str = "invalid_request_error", code: str | None = None) -> web.Response:
            return _json(status, messages_api.error_json(status, message) if anthropic else error_body(message, kind, code))

        sid = request.match_info["sid"]
        session = self._sessions.get(sid)
        if session is None:
            if sid in self._closed:
                return fail(409, f"session {sid} is closed: its rollout has ended", code="session_closed")
            return fail(404, f"no session {sid} on this gateway", code="unknown_session")
        # Bearer (OpenAI SDKs, ANTHROPIC_AUTH_TOKEN), api-key (Azure style), x-api-key (Anthropic SDKs)
        headers = request.headers
        auth = headers.get("Authorization", "")
        token = auth[7:].strip() if auth[:7].lower() == "bearer " else headers.get("x-api-key") or headers.get("api-key", "")
        if not token or not hmac.compare_digest(token.encode(), session.secret.encode()):
            return fail(401, "invalid or missing API key for this session", "authentication_error", "invalid_api_key")
        if session.closed:
            return fail(409, f"session {sid} is closed: its rollout has ended", code="session_closed")
        return session

    @staticmethod
    async def _body(request: web.Request) -> tuple[bytes, dict[str, Any]] | BodyError:
        """The request's bytes and JSON object, or what is wrong with them (`verifiers.gateway.validate`)."""
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return BodyError(413, f"the request body is larger than the gateway's limit of {MAX_BODY_BYTES:,} bytes")
        try:
            return raw, parse_body(raw)
        except BodyError as exc:
            return exc

    @staticmethod
    def _retry_count(request: web.Request) -> int:
        try:
            return int(request.headers.get("x-stainless-retry-count", "0") or 0)
        except ValueError:
            return 0

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        session = self._session(request)
        if isinstance(session, web.Response):
            return session
        read = await self._body(request)
        if isinstance(read, BodyError):
            return _json(read.status, error_body(read.message))
        raw, body = read
        try:
            check_chat(body)
        except DialectError as exc:
            return _json(exc.status, error_body(exc.message, param=exc.param))
        status, payload = await session.handle(body, self._retry_count(request), raw)
        if status != 200 or not body.get("stream"):
            return _json(status, payload)
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return await sse_response(request, sse_events(payload, include_usage=include_usage))

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        """``POST /responses``: one chat call of the session, answered as a Response (or its events)."""
        session = self._session(request)
        if isinstance(session, web.Response):
            return session
        read = await self._body(request)
        if isinstance(read, BodyError):
            return _json(read.status, error_body(read.message))
        raw, body = read
        try:
            check_sampling(body)
            translated = responses_api.to_chat(body, session.responses)
            check_chat(translated.chat)
        except DialectError as exc:
            return _json(exc.status, error_body(exc.message, code=exc.code, param=exc.param))
        except (TypeError, ValueError, AttributeError, KeyError, IndexError) as exc:  # a shape no check foresaw
            return _json(400, error_body(_unreadable(exc)))

        def render(reply: Reply, call: GatewayCall | None) -> Reply:
            status, payload = reply
            if status != 200:
                return reply
            response = responses_api.response_object(payload, translated, session.model, session.sampling_args)
            if response["store"]:
                session.responses[response["id"]] = responses_api.stored_response(response, translated)
            return 200, response

        status, payload = await session.handle(translated.chat, self._retry_count(request), raw, render)
        if status != 200 or not body.get("stream"):
            return _json(status, payload)
        return await sse_response(request, responses_api.sse_events(payload))

    async def _stored_response(self, request: web.Request) -> web.Response:
        """``GET``/``DELETE /responses/{id}``: a response this session stored."""
        session = self._session(request)
        if isinstance(session, web.Response):
            return session
        rid = request.match_info["rid"]
        stored = session.responses.get(rid)
        if stored is None:
            return _json(404, error_body(f"Response with id '{rid}' not found.", code="response_not_found"))
        if request.method == "DELETE":
            del session.responses[rid]
            return _json(200, {"id": rid, "object": "response.deleted", "deleted": True})
        return _json(200, stored.response)

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        """``POST /v1/messages`` (Anthropic): one chat call of the session, answered as a Message."""
        session = self._session(request, anthropic=True)
        if isinstance(session, web.Response):
            return session
        read = await self._body(request)
        if isinstance(read, BodyError):
            return _json(read.status, messages_api.error_json(read.status, read.message))
        raw, body = read
        try:
            check_sampling(body)
            translated = messages_api.to_chat(body)
            check_chat(translated.chat)
        except DialectError as exc:
            return _json(exc.status, messages_api.error_json(exc.status, exc.message))
        except (TypeError, ValueError, AttributeError, KeyError, IndexError) as exc:  # a shape no check foresaw
            return _json(400, messages_api.error_json(400, _unreadable(exc)))

        def render(reply: Reply, call: GatewayCall | None) -> Reply:
            status, payload = reply
            if status != 200:
                return status, messages_api.error_json(status, payload["error"]["message"])
            return 200, messages_api.message_object(payload, translated, session.model)

        status, payload = await session.handle(translated.chat, self._retry_count(request), raw, render)
        if status != 200 or not body.get("stream"):
            return _json(status, payload)
        return await sse_response(request, messages_api.sse_events(payload))

    async def _models(self, request: web.Request) -> web.Response:
        """The session's model, listed in the OpenAI shape or, for an Anthropic SDK, in its own."""
        anthropic = "anthropic-version" in request.headers or "x-api-key" in request.headers
        session = self._session(request, anthropic=anthropic)
        if isinstance(session, web.Response):
            return session
        listing = messages_api.models_json(session.model) if anthropic else models_json(session.model)
        asked = request.match_info.get("model")
        if asked is None:
            return _json(200, listing)
        if asked != session.model:
            message = f"model {asked!r} is not served here; this session serves {session.model!r}"
            return _json(404, messages_api.error_json(404, message) if anthropic
                         else error_body(message, code="model_not_found"))
        return _json(200, listing["data"][0])

    async def _unsupported(self, request: web.Request) -> web.Response:
        session = self._session(request)
        if isinstance(session, web.Response):
            return session
        rest = request.match_info["rest"].strip("/")
        what = _OTHER_ROUTES.get(rest.split("/")[0], f"{request.method} /{rest}")
        return _json(404, error_body(f"this gateway serves {_SERVED}; {what} is not supported",
                                     code="unsupported_route"))

    async def _unsupported_anthropic(self, request: web.Request) -> web.Response:
        session = self._session(request, anthropic=True)
        if isinstance(session, web.Response):
            return session
        rest = request.match_info["rest"].strip("/")
        return _json(404, messages_api.error_json(
            404, f"this gateway serves {_SERVED}; {request.method} /messages/{rest} is not supported"))

    async def _no_session(self, request: web.Request) -> web.Response:
        return _json(404, error_body("use a session URL: http://127.0.0.1:<port>/s/<session>/v1", code="unknown_route"))


_GATEWAY: InterceptionGateway | None = None
_GATEWAY_LOCK = threading.Lock()


def get_gateway() -> InterceptionGateway:
    """The process's gateway, started on first use."""
    global _GATEWAY
    with _GATEWAY_LOCK:
        if _GATEWAY is None:
            _GATEWAY = InterceptionGateway()
        return _GATEWAY.start()
