"""The scripted server's aiohttp application: request handlers, counters and the error bodies.

`ScriptedApp` answers ``/v1/chat/completions``, ``/v1/completions``, ``/v1/models``, ``/health``
and ``/stats`` from a compiled `ServerScript`; it does not care whether a thread
(`server.ScriptedServer`) or a child process (`spawn`) serves it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections import deque
from typing import Any

from aiohttp import web

from verifiers.gateway.wire import sse_response
from verifiers.inference.server.protocol import ERROR_TYPES
from verifiers.testing.script import CompiledScript, ServerScript, fill, render_chat
from verifiers.testing.sse import chat_chunks

try:  # optional: faster serialisation when installed
    import orjson

    def _dumps(obj: Any) -> bytes:
        return orjson.dumps(obj)

except ImportError:  # pragma: no cover - depends on the environment
    _json_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode

    def _dumps(obj: Any) -> bytes:
        return _json_encode(obj).encode()


HOST = "127.0.0.1"
REQUEST_LOG_SIZE = 10_000
# Seconds a stopping server waits for in-flight requests (e.g. scripted hangs) before
# cancelling them; stopping must never take as long as a hang.
_SHUTDOWN_TIMEOUT_S = 0.25
_LOGPROBS = tuple(-0.01 * (k + 1) for k in range(7))
# Injected failures ask the client to retry after 10 ms (the official client honours
# `retry-after-ms`), so retry tests do not wait for its exponential backoff.
_RETRY_HEADERS = {"retry-after-ms": "10"}


# -- request helpers ---------------------------------------------------------------------


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
            "type": ERROR_TYPES.get(status, "InternalServerError" if status >= 500 else "APIError"),
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


class ScriptedApp:
    """Request handlers and counters; independent of how (thread/process) it is served."""

    def __init__(self, script: ServerScript) -> None:
        self.compiled = CompiledScript(script)
        self.request_log: deque[dict[str, Any]] = deque(maxlen=REQUEST_LOG_SIZE)
        self.n_requests = 0
        self.n_errors = 0
        self.n_hangs = 0
        self._ids = itertools.count()
        self._call_ids = itertools.count()

    def set_script(self, script: ServerScript) -> None:
        self.compiled = CompiledScript(script)

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
        self, request: web.Request, state: CompiledScript
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
        if state.hang_rate and state.rng.random() < state.hang_rate:
            self.n_hangs += 1
            await asyncio.sleep(state.hang_s)
        return body, None

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        state = self.compiled
        body, failure = await self._admit(request, state)
        if failure is not None:
            return failure
        assert body is not None
        try:
            prompt, last_user, last_message, turn = render_chat(body["messages"])
            n = _n_of(body)
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            self.n_errors += 1
            return _error(400, f"invalid chat request: {e!r}")
        if state.context_length is not None and len(prompt) > state.context_length:
            self.n_errors += 1
            return _context_error(state.context_length, len(prompt))

        rule = state.pick(last_message, turn)
        content = fill(rule, last_user, last_message, turn)
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
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return await sse_response(request, chat_chunks(payload, include_usage=include_usage))
        return _json(payload)

    async def _completions(self, request: web.Request) -> web.Response:
        state = self.compiled
        body, failure = await self._admit(request, state)
        if failure is not None:
            return failure
        assert body is not None
        if body.get("stream"):
            self.n_errors += 1
            return _error(400, "ScriptedServer streams chat completions only (POST /v1/chat/completions)")
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
            text = (fill(rule, prompt, prompt, 0) or "") + rule.tool_text
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
