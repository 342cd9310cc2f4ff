"""A scripted, OpenAI-compatible HTTP server for tests and benchmarks.

Environment tests need a model that answers instantly, deterministically and on cue:
echo the user, call a tool with malformed arguments, fail the first two requests,
hang until the client times out, refuse an overlong prompt with vLLM's wording.
`ScriptedServer` does that over real HTTP on 127.0.0.1, so the code under test talks to
it through the same client stack (``openai``, retries, timeouts) it uses in production.

The script (`ServerScript`) is a pydantic model so it can cross a process boundary as
JSON (`ScriptedServer.spawn`), but it is compiled into plain objects once, and the
request path only touches dicts and strings: a throughput benchmark must measure the
client, not this server.

Tokenisation mimics a vLLM server without a tokenizer: one token per character, token
id ``ord(ch)``; a chat prompt is rendered as ``<|role|>content\\n`` per message followed
by ``<|assistant|>``. An assistant message's tool calls are rendered as
``json.dumps([{"name": ..., "arguments": ...}])`` right after its content, the same
text the server emits as the completion tokens of a tool-calling reply, so the prompt of
turn k+1 extends prompt + completion of turn k, as it does with a real chat template.

Run it standalone with ``python -m verifiers.testing.server --script script.json --port 8000``
(docs/evaluation.md: trying vf-eval offline against it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import queue
import random
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from aiohttp import web
from pydantic import BaseModel, Field

try:  # optional: faster serialisation when installed
    import orjson

    def _dumps(obj: Any) -> bytes:
        return orjson.dumps(obj)

except ImportError:  # pragma: no cover - depends on the environment
    _json_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode

    def _dumps(obj: Any) -> bytes:
        return _json_encode(obj).encode()


__all__ = [
    "ScriptedReply",
    "ScriptedServer",
    "ScriptedToolCall",
    "ServerScript",
    "SpawnedServer",
]

HOST = "127.0.0.1"
REQUEST_LOG_SIZE = 10_000
# Seconds a stopping server waits for in-flight requests (e.g. scripted hangs) before
# cancelling them; stopping must never take as long as a hang.
_SHUTDOWN_TIMEOUT_S = 0.25
_PLACEHOLDER_RE = re.compile(r"\{(last_user|last_message|reversed_last_user|turn)\}")
_LOGPROBS = tuple(-0.01 * (k + 1) for k in range(7))
_ERROR_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    408: "RequestTimeoutError",
    409: "ConflictError",
    422: "UnprocessableEntityError",
    429: "RateLimitError",
    503: "ServiceUnavailableError",
}
# Injected failures ask the client to retry after 10 ms (the official client honours
# `retry-after-ms`), so retry tests do not wait for its exponential backoff.
_RETRY_HEADERS = {"retry-after-ms": "10"}


# -- the script ------------------------------------------------------------------------


class ScriptedToolCall(BaseModel):
    """One tool call of a scripted reply.

    ``arguments`` is sent to the client verbatim (never parsed or re-encoded), so a
    test can send malformed JSON and check how the code under test copes.
    """

    name: str
    arguments: str = "{}"


class ScriptedReply(BaseModel):
    """One rule of the script: a reply and the conditions under which it is given.

    ``content`` may contain ``{last_user}``, ``{last_message}``, ``{reversed_last_user}``
    and ``{turn}`` (the number of assistant messages in the request). They are replaced
    in a single pass over the template, so other braces are safe and text coming from
    the request is never substituted again.
    """

    content: str | None = None
    tool_calls: list[ScriptedToolCall] = Field(default_factory=list)
    finish_reason: str | None = None
    """Defaults to ``"tool_calls"`` when the reply has tool calls, else ``"stop"``."""
    match: str | None = None
    """Regex searched in the content of the request's last message; the rule applies only if found."""
    turn: int | None = None
    """The rule applies only when the request holds exactly this many assistant messages."""
    latency_s: float | None = None
    """Overrides `ServerScript.latency_s` for this reply."""


class ServerScript(BaseModel):
    """Everything the server does, as data (JSON-serialisable for `ScriptedServer.spawn`).

    The first reply whose ``match``/``turn`` conditions hold is used; if none holds, the
    last one is. Failure injection happens in this order: ``fail_first``, then
    ``error_rate``, then ``hang_rate`` (a hang delays a normal answer), then the
    ``context_length`` check.
    """

    replies: list[ScriptedReply] = Field(
        default_factory=lambda: [ScriptedReply(content="{last_user}")], min_length=1
    )
    latency_s: float = Field(0.0, ge=0.0)
    error_rate: float = Field(0.0, ge=0.0, le=1.0)
    error_statuses: list[int] = Field(default_factory=lambda: [500, 429], min_length=1)
    fail_first: int = Field(0, ge=0)
    """The first N requests after the script is installed fail with ``fail_first_status``."""
    fail_first_status: int = 500
    hang_rate: float = Field(0.0, ge=0.0, le=1.0)
    hang_s: float = Field(3600.0, ge=0.0)
    seed: int = 0
    """Seeds the RNG behind ``error_rate``/``hang_rate``/``error_statuses``."""
    context_length: int | None = None
    """Prompts longer than this many tokens get vLLM's HTTP 400 "maximum context length" error."""
    model: str = "scripted"
    max_tokens_truncates: bool = True
    """Cut replies longer than the request's max_tokens and report ``finish_reason="length"``."""


# -- the compiled script (plain objects, read on every request) ----------------------------


@dataclass(frozen=True, slots=True)
class _Rule:
    content: str | None
    templated: bool
    tool_calls: tuple[tuple[str, str], ...]
    tool_text: str
    finish_reason: str
    pattern: re.Pattern[str] | None
    turn: int | None
    latency_s: float


class _Compiled:
    """A script turned into what the request path needs, plus its mutable RNG state.

    Swapping the whole object is how `set_script` stays thread-safe without locks.
    """

    __slots__ = (
        "context_length",
        "error_rate",
        "error_statuses",
        "fail_first_status",
        "fail_remaining",
        "hang_rate",
        "hang_s",
        "model",
        "rng",
        "rules",
        "script",
        "truncates",
    )

    def __init__(self, script: ServerScript) -> None:
        self.script = script
        self.rules = tuple(_compile_rule(r, script.latency_s) for r in script.replies)
        self.error_rate = script.error_rate
        self.error_statuses = tuple(script.error_statuses)
        self.fail_remaining = script.fail_first
        self.fail_first_status = script.fail_first_status
        self.hang_rate = script.hang_rate
        self.hang_s = script.hang_s
        self.rng = random.Random(script.seed)
        self.context_length = script.context_length
        self.model = script.model
        self.truncates = script.max_tokens_truncates

    def pick(self, last_message: str, turn: int) -> _Rule:
        for rule in self.rules:
            if rule.turn is not None and rule.turn != turn:
                continue
            if rule.pattern is not None and rule.pattern.search(last_message) is None:
                continue
            return rule
        return self.rules[-1]


def _compile_rule(reply: ScriptedReply, default_latency_s: float) -> _Rule:
    calls = tuple((tc.name, tc.arguments) for tc in reply.tool_calls)
    finish = reply.finish_reason or ("tool_calls" if calls else "stop")
    return _Rule(
        content=reply.content,
        templated=reply.content is not None and _PLACEHOLDER_RE.search(reply.content) is not None,
        tool_calls=calls,
        tool_text=_tool_calls_text(calls),
        finish_reason=finish,
        pattern=re.compile(reply.match) if reply.match is not None else None,
        turn=reply.turn,
        latency_s=default_latency_s if reply.latency_s is None else reply.latency_s,
    )


def _tool_calls_text(calls: tuple[tuple[str, str], ...] | list[tuple[str, str]]) -> str:
    """The token text of tool calls, shared by completions and prompt rendering."""
    if not calls:
        return ""
    return json.dumps([{"name": name, "arguments": args} for name, args in calls])


# -- request helpers ---------------------------------------------------------------------


def _text_of(content: Any) -> str:
    """Message content as text: a string, a list of ``{"type": "text", "text": ...}`` parts, or None."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text") or "" for p in content if isinstance(p, dict))
    raise TypeError(f"unsupported message content: {type(content).__name__}")


def _request_tool_calls_text(tool_calls: list[Any]) -> str:
    calls = []
    for tc in tool_calls:
        fn = tc.get("function") or {}
        calls.append((fn.get("name", ""), fn.get("arguments", "")))
    return _tool_calls_text(calls)


def _render_chat(messages: list[dict[str, Any]]) -> tuple[str, str, str, int]:
    """Render messages as the prompt text; also return last user text, last text, turn."""
    parts: list[str] = []
    last_user = last_message = ""
    turn = 0
    for m in messages:
        role = m["role"]
        text = _text_of(m.get("content"))
        rendered = text
        if role == "assistant":
            turn += 1
            tool_calls = m.get("tool_calls")
            if tool_calls:
                rendered = text + _request_tool_calls_text(tool_calls)
        elif role == "user":
            last_user = text
        parts.append(f"<|{role}|>{rendered}\n")
        last_message = text
    parts.append("<|assistant|>")
    return "".join(parts), last_user, last_message, turn


def _fill(rule: _Rule, last_user: str, last_message: str, turn: int) -> str | None:
    if not rule.templated:
        return rule.content
    values = {
        "last_user": last_user,
        "last_message": last_message,
        "reversed_last_user": last_user[::-1],
        "turn": str(turn),
    }
    assert rule.content is not None
    return _PLACEHOLDER_RE.sub(lambda m: values[m.group(1)], rule.content)


def _n_of(body: dict[str, Any]) -> int:
    n = int(body.get("n") or 1)
    if n < 1:
        raise ValueError("n must be at least 1")
    return n


def _max_tokens(body: dict[str, Any]) -> int | None:
    limit = body.get("max_completion_tokens")
    if limit is None:
        limit = body.get("max_tokens")
    return limit if isinstance(limit, int) else None


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    payload = {
        "error": {
            "message": message,
            "type": _ERROR_TYPES.get(status, "InternalServerError" if status >= 500 else "APIError"),
            "param": None,
            "code": status,
        }
    }
    return web.Response(body=_dumps(payload), status=status, content_type="application/json", headers=headers)


def _context_error(limit: int, requested: int) -> web.Response:
    return _error(
        400,
        f"This model's maximum context length is {limit} tokens. However, you requested "
        f"{requested} tokens in the messages, Please reduce the length of the messages.",
    )


def _json(payload: dict[str, Any]) -> web.Response:
    return web.Response(body=_dumps(payload), content_type="application/json")


# -- the application ---------------------------------------------------------------------


class _ScriptedApp:
    """Request handlers and counters; independent of how (thread/process) it is served."""

    def __init__(self, script: ServerScript) -> None:
        self.compiled = _Compiled(script)
        self.request_log: deque[dict[str, Any]] = deque(maxlen=REQUEST_LOG_SIZE)
        self.n_requests = 0
        self.n_errors = 0
        self.n_hangs = 0
        self._ids = itertools.count()
        self._call_ids = itertools.count()

    def set_script(self, script: ServerScript) -> None:
        self.compiled = _Compiled(script)

    def reset(self) -> None:
        self.request_log.clear()
        self.n_requests = self.n_errors = self.n_hangs = 0

    def stats(self) -> dict[str, int]:
        return {"n_requests": self.n_requests, "n_errors": self.n_errors, "n_hangs": self.n_hangs}

    def make_app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_get("/stats", self._stats)
        return app

    async def start_runner(self, port: int) -> tuple[web.AppRunner, int]:
        """Listen on 127.0.0.1:port (0 = any free port) in the running loop."""
        runner = web.AppRunner(
            self.make_app(),
            access_log=None,
            shutdown_timeout=_SHUTDOWN_TIMEOUT_S,
            handler_cancellation=True,
        )
        await runner.setup()
        site = web.TCPSite(runner, HOST, port)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        return runner, runner.addresses[0][1]

    async def _admit(
        self, request: web.Request, state: _Compiled
    ) -> tuple[dict[str, Any] | None, web.Response | None]:
        """Shared prologue of both completion endpoints: parse, log, inject failures.

        ``state`` is the script current on arrival: a request keeps it even if it hangs
        across a `set_script`.
        """
        self.n_requests += 1
        try:
            body = json.loads(await request.read())
        except ValueError:
            body = None
        if not isinstance(body, dict):
            self.n_errors += 1
            return None, _error(400, "request body must be a JSON object")
        self.request_log.append(body)
        if state.fail_remaining > 0:
            state.fail_remaining -= 1
            self.n_errors += 1
            status = state.fail_first_status
            return None, _error(status, f"scripted failure (HTTP {status})", _RETRY_HEADERS)
        if state.error_rate and state.rng.random() < state.error_rate:
            self.n_errors += 1
            status = state.rng.choice(state.error_statuses)
            return None, _error(status, f"scripted failure (HTTP {status})", _RETRY_HEADERS)
        if body.get("stream"):
            self.n_errors += 1
            return None, _error(400, "ScriptedServer does not support stream=true")
        if state.hang_rate and state.rng.random() < state.hang_rate:
            self.n_hangs += 1
            await asyncio.sleep(state.hang_s)
        return body, None

    async def _chat(self, request: web.Request) -> web.Response:
        state = self.compiled
        body, failure = await self._admit(request, state)
        if failure is not None:
            return failure
        assert body is not None
        try:
            prompt, last_user, last_message, turn = _render_chat(body["messages"])
            n = _n_of(body)
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            self.n_errors += 1
            return _error(400, f"invalid chat request: {e!r}")
        if state.context_length is not None and len(prompt) > state.context_length:
            self.n_errors += 1
            return _context_error(state.context_length, len(prompt))

        rule = state.pick(last_message, turn)
        content = _fill(rule, last_user, last_message, turn)
        text = (content or "") + rule.tool_text
        tool_calls = rule.tool_calls
        finish_reason = rule.finish_reason
        limit = _max_tokens(body)
        if state.truncates and limit is not None and len(text) > limit:
            # Like a real model cut mid tool call: the partial text stays content.
            text = text[:limit]
            content, tool_calls, finish_reason = text, (), "length"
        if rule.latency_s > 0:
            await asyncio.sleep(rule.latency_s)

        want_ids = bool(body.get("return_token_ids"))
        logprobs = _chat_logprobs(text) if body.get("logprobs") else None
        token_ids = list(map(ord, text)) if want_ids else None
        choices = []
        for index in range(n):
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if tool_calls:
                message["tool_calls"] = [
                    {
                        "id": f"call_{next(self._call_ids)}",
                        "type": "function",
                        "function": {"name": name, "arguments": args},
                    }
                    for name, args in tool_calls
                ]
            choice: dict[str, Any] = {
                "index": index,
                "message": message,
                "finish_reason": finish_reason,
                "logprobs": logprobs,
            }
            if want_ids:
                choice["token_ids"] = token_ids
            choices.append(choice)
        payload: dict[str, Any] = {
            "id": f"chatcmpl-{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": state.model,
            "choices": choices,
            "usage": {
                "prompt_tokens": len(prompt),
                "completion_tokens": n * len(text),
                "total_tokens": len(prompt) + n * len(text),
            },
        }
        if want_ids:
            payload["prompt_token_ids"] = list(map(ord, prompt))
        return _json(payload)

    async def _completions(self, request: web.Request) -> web.Response:
        state = self.compiled
        body, failure = await self._admit(request, state)
        if failure is not None:
            return failure
        assert body is not None
        try:
            prompts = _prompts_of(body["prompt"])
            n = _n_of(body)
        except (KeyError, TypeError, ValueError) as e:
            self.n_errors += 1
            return _error(400, f"invalid completion request: {e!r}")
        longest = max(len(p) for p in prompts)
        if state.context_length is not None and longest > state.context_length:
            self.n_errors += 1
            return _context_error(state.context_length, longest)

        limit = _max_tokens(body)
        want_ids = bool(body.get("return_token_ids"))
        logprobs_k = body.get("logprobs")
        completions = []
        latency = 0.0
        for prompt in prompts:
            rule = state.pick(prompt, 0)
            latency = max(latency, rule.latency_s)
            text = (_fill(rule, prompt, prompt, 0) or "") + rule.tool_text
            finish_reason = rule.finish_reason
            if state.truncates and limit is not None and len(text) > limit:
                text, finish_reason = text[:limit], "length"
            completions.append((prompt, text, finish_reason))
        if latency > 0:
            await asyncio.sleep(latency)

        choices = []
        completion_tokens = 0
        for prompt, text, finish_reason in completions:
            logprobs = _completion_logprobs(text, len(prompt)) if logprobs_k is not None else None
            for _ in range(n):
                choice: dict[str, Any] = {
                    "index": len(choices),
                    "text": text,
                    "finish_reason": finish_reason,
                    "logprobs": logprobs,
                }
                if want_ids:
                    choice["token_ids"] = list(map(ord, text))
                    choice["prompt_token_ids"] = list(map(ord, prompt))
                choices.append(choice)
                completion_tokens += len(text)
        prompt_tokens = sum(len(p) for p in prompts)
        payload: dict[str, Any] = {
            "id": f"cmpl-{next(self._ids)}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": state.model,
            "choices": choices,
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
        if want_ids and len(prompts) == 1:
            payload["prompt_token_ids"] = list(map(ord, prompts[0]))
        return _json(payload)

    async def _models(self, request: web.Request) -> web.Response:
        state = self.compiled
        model = {"id": state.model, "object": "model", "created": 0, "owned_by": "verifiers"}
        if state.context_length is not None:
            model["max_model_len"] = state.context_length
        # The scripted server answers whatever model name it is asked for; say so, so that
        # vf-eval's endpoint check does not reject names it does not list.
        return _json({"object": "list", "data": [model], "vf_accepts_any_model": True})

    async def _health(self, request: web.Request) -> web.Response:
        return _json({"status": "ok"})

    async def _stats(self, request: web.Request) -> web.Response:
        return _json(self.stats())


def _prompts_of(prompt: Any) -> list[str]:
    """A /v1/completions prompt as texts: a string, strings, token ids, or lists of token ids."""
    if isinstance(prompt, str):
        return [prompt]
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, str) for p in prompt):
            return list(prompt)
        if all(isinstance(t, int) for t in prompt):
            return ["".join(map(chr, prompt))]
        if all(isinstance(p, list) for p in prompt):
            return ["".join(map(chr, p)) for p in prompt]
    raise TypeError("prompt must be a string, a list of strings, or token ids")


def _chat_logprobs(text: str) -> dict[str, Any]:
    return {
        "content": [
            {"token": ch, "logprob": _LOGPROBS[i % 7], "bytes": list(ch.encode()), "top_logprobs": []}
            for i, ch in enumerate(text)
        ]
    }


def _completion_logprobs(text: str, offset: int) -> dict[str, Any]:
    lps = [_LOGPROBS[i % 7] for i in range(len(text))]
    return {
        "tokens": list(text),
        "token_logprobs": lps,
        "top_logprobs": [{ch: lp} for ch, lp in zip(text, lps, strict=True)],
        "text_offset": list(range(offset, offset + len(text))),
    }


# -- in-process server -------------------------------------------------------------------


class ScriptedServer:
    """The scripted server on 127.0.0.1, served by a daemon thread with its own event loop.

    A separate loop keeps the server's work out of the caller's loop, so an async test or
    benchmark measures the client only. The thread is a daemon: a forgotten server dies
    with the process.
    """

    def __init__(self, script: ServerScript | None = None, port: int = 0) -> None:
        self._app = _ScriptedApp(script if script is not None else ServerScript())
        self._requested_port = port
        self._port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle
    def start(self) -> ScriptedServer:
        """Start serving; returns once the socket listens."""
        if self._thread is not None:
            raise RuntimeError("ScriptedServer already started")
        ready = threading.Event()
        failure: list[BaseException] = []
        self._thread = threading.Thread(
            target=self._serve, args=(ready, failure), name="ScriptedServer", daemon=True
        )
        self._thread.start()
        ready.wait()
        if failure:
            self._thread.join()
            self._thread = None
            raise failure[0]
        return self

    def stop(self) -> None:
        """Stop serving; in-flight requests (e.g. scripted hangs) are cancelled."""
        thread, loop = self._thread, self._loop
        if thread is None or loop is None:
            return
        with contextlib.suppress(RuntimeError):  # loop already closed
            loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        self._thread = self._loop = None
        self._port = None

    def _serve(self, ready: threading.Event, failure: list[BaseException]) -> None:
        loop = asyncio.new_event_loop()
        try:
            runner, self._port = loop.run_until_complete(self._app.start_runner(self._requested_port))
        except BaseException as e:  # e.g. the port is taken: re-raised by start()
            failure.append(e)
            loop.close()
            ready.set()
            return
        self._loop = loop
        ready.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(runner.cleanup())
            _cancel_all(loop)
            loop.close()

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def __aenter__(self) -> ScriptedServer:
        return await asyncio.to_thread(self.start)

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.stop)

    # -- addresses
    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("ScriptedServer is not running; call start() first")
        return self._port

    @property
    def base_url(self) -> str:
        """The OpenAI client's ``base_url``: ``http://127.0.0.1:<port>/v1``."""
        return f"http://{HOST}:{self.port}/v1"

    # -- script and observations
    @property
    def script(self) -> ServerScript:
        return self._app.compiled.script

    def set_script(self, script: ServerScript) -> None:
        """Replace the script; requests already being answered keep the old one."""
        self._app.set_script(script)

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Bodies of the last 10,000 completion requests received (a snapshot)."""
        return list(self._app.request_log)

    @property
    def n_requests(self) -> int:
        return self._app.n_requests

    @property
    def n_errors(self) -> int:
        return self._app.n_errors

    @property
    def n_hangs(self) -> int:
        return self._app.n_hangs

    def stats(self) -> dict[str, int]:
        """The same counters as ``GET /stats``."""
        return self._app.stats()

    def reset(self) -> None:
        """Clear the request log and counters (the script's own state is kept)."""
        self._app.reset()

    @staticmethod
    def spawn(
        script: ServerScript | None = None,
        port: int = 0,
        *,
        max_lifetime_s: float = 3600.0,
        startup_timeout_s: float = 60.0,
    ) -> SpawnedServer:
        """Start the server in a child process (its own interpreter, its own core).

        Returns once the child listens. The child exits by itself when this process dies
        or after ``max_lifetime_s``.
        """
        script_json = (script if script is not None else ServerScript()).model_dump_json()
        cmd = [
            sys.executable,
            "-m",
            "verifiers.testing.server",
            "--port",
            str(port),
            "--max-lifetime-s",
            str(max_lifetime_s),
            "--parent-pid",
            str(os.getpid()),
        ]
        # Command lines are limited (128 KiB per argument on Linux): big scripts go via stdin.
        via_stdin = len(script_json) > 32_000
        cmd += ["--script", "-"] if via_stdin else ["--script-json", script_json]
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE if via_stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
            env=_child_env(),
        )
        if via_stdin:
            assert proc.stdin is not None
            proc.stdin.write(script_json)
            proc.stdin.close()
        try:
            port = _read_port(proc, startup_timeout_s)
        except BaseException:
            _terminate(proc)
            raise
        return SpawnedServer(proc, port)


def _child_env() -> dict[str, str]:
    """The environment with this checkout first on PYTHONPATH, so the child runs this very code
    even when verifiers is not installed (e.g. tests run from a source tree)."""
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def _cancel_all(loop: asyncio.AbstractEventLoop) -> None:
    tasks = asyncio.all_tasks(loop)
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    loop.run_until_complete(loop.shutdown_asyncgens())


# -- server in a child process -------------------------------------------------------------


class SpawnedServer:
    """Handle on a server started by `ScriptedServer.spawn`."""

    def __init__(self, proc: subprocess.Popen[str], port: int) -> None:
        self.proc = proc
        self.port = port

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}/v1"

    def stats(self, timeout_s: float = 5.0) -> dict[str, int]:
        """``GET /stats`` of the child: n_requests, n_errors, n_hangs."""
        with urllib.request.urlopen(f"http://{HOST}:{self.port}/stats", timeout=timeout_s) as resp:
            return json.loads(resp.read())

    def stop(self) -> None:
        """Terminate the child (kill it if it does not exit within 5 s)."""
        _terminate(self.proc)

    def __enter__(self) -> SpawnedServer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _terminate(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def _read_port(proc: subprocess.Popen[str], timeout_s: float) -> int:
    """Read the child's ``LISTENING <port>`` line without blocking past the timeout."""
    assert proc.stdout is not None
    lines: queue.Queue[str] = queue.Queue()
    stdout = proc.stdout
    threading.Thread(target=lambda: lines.put(stdout.readline()), daemon=True).start()
    try:
        line = lines.get(timeout=timeout_s)
    except queue.Empty:
        raise TimeoutError(f"scripted server did not start within {timeout_s} s") from None
    word, _, port = line.partition(" ")
    if word != "LISTENING":
        raise RuntimeError(f"scripted server failed to start (exit code {proc.wait()}); see its stderr")
    return int(port)


async def _serve_until_stopped(
    script: ServerScript, port: int, max_lifetime_s: float, parent_pid: int | None
) -> None:
    app = _ScriptedApp(script)
    runner, bound = await app.start_runner(port)
    print(f"LISTENING {bound}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):  # not on Windows
            loop.add_signal_handler(sig, stop.set)
    watcher = asyncio.create_task(_watch_parent(stop.set, max_lifetime_s, parent_pid))
    try:
        await stop.wait()
    finally:
        watcher.cancel()
        await runner.cleanup()


async def _watch_parent(stop: Callable[[], None], max_lifetime_s: float, parent_pid: int | None) -> None:
    """Stop when the parent process is gone (we get re-parented) or the lifetime is over."""
    parent = parent_pid if parent_pid is not None else os.getppid()
    deadline = time.monotonic() + max_lifetime_s if max_lifetime_s > 0 else float("inf")
    while os.getppid() == parent and time.monotonic() < deadline:
        await asyncio.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
    stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m verifiers.testing.server",
        description="Serve a scripted OpenAI-compatible API on 127.0.0.1.",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--script", help="path to a ServerScript JSON file ('-' reads stdin)")
    source.add_argument("--script-json", help="the ServerScript as a JSON string")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (printed on stdout)")
    parser.add_argument(
        "--max-lifetime-s", type=float, default=3600.0, help="exit after this many seconds (<= 0: never)"
    )
    parser.add_argument("--parent-pid", type=int, default=None, help="exit when this process is gone")
    args = parser.parse_args(argv)

    if args.script_json is not None:
        raw = args.script_json
    elif args.script == "-":
        raw = sys.stdin.read()
    elif args.script is not None:
        with open(args.script, encoding="utf-8") as f:
            raw = f.read()
    else:
        raw = "{}"
    script = ServerScript.model_validate_json(raw)
    asyncio.run(_serve_until_stopped(script, args.port, args.max_lifetime_s, args.parent_pid))


if __name__ == "__main__":
    # Run the importable module's main, not this `__main__` copy of it, so the script models
    # are the canonical classes (pydantic resolves their annotations through sys.modules).
    from verifiers.testing.server import main as _main

    _main()
