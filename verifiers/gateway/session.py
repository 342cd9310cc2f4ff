"""One rollout's view of the gateway: its URL and secret, its model and sampling, its record.

A session is opened by the environment (on the rollout's event loop) and served by the
gateway's own thread; every upstream call is run on the rollout's loop, where the
environment's client lives (clients are bound to the loop they were made on).
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import time
from collections.abc import Callable
from typing import Any

from verifiers.clients.response import ModelResponse
from verifiers.errors import (
    BadRequestError,
    ModelError,
    ModelTimeoutError,
    OverlongPromptError,
    RateLimitError,
    ServerError,
)
from verifiers.gateway.records import NOT_FOLLOW_UPS, GatewayCall, SessionLimits
from verifiers.gateway.wire import error_body, program_args, reply_json
from verifiers.types import SamplingArgs, TurnTokens

Reply = tuple[int, dict[str, Any]]
Render = Callable[[Reply, "GatewayCall | None"], Reply]
"""Turns a chat answer into what a program of another dialect receives (see `verifiers.gateway.dialects`)."""
TokenPrompt = Callable[["Session", list[dict[str, Any]], Any, dict[str, Any]], Any]
"""Async hook ``(session, messages, tools, sampling_args) -> ModelResponse | str | None`` that samples from token
ids (token-in); a string (why, e.g. ``first_call``) or None means "send the messages" (see
`verifiers.gateway.token_in`)."""


def _status_of(exc: BaseException, default: int) -> int:
    """The upstream HTTP status behind one of our errors, when the SDK kept it."""
    cur: BaseException | None = exc
    while cur is not None:
        status = getattr(cur, "status_code", None)
        if isinstance(status, int) and 400 <= status < 600:
            return status
        cur = cur.__cause__ or cur.__context__
    return default


def _body_key(raw: bytes) -> str:
    """An SDK retry re-sends the very same bytes; hashing them skips re-serialising the body."""
    return hashlib.blake2b(raw, digest_size=16).hexdigest()


class Session:
    """A program's connection to one rollout: ``base_url`` + ``secret`` (its ``OPENAI_API_KEY``)."""

    def __init__(
        self,
        gateway_url: str,
        client: Any,
        model: str,
        sampling_args: SamplingArgs | None,
        limits: SessionLimits,
        loop: asyncio.AbstractEventLoop,
        token_prompt: TokenPrompt | None = None,
    ) -> None:
        self.id = secrets.token_hex(8)
        self.secret = f"vf-{secrets.token_urlsafe(24)}"
        self.base_url = f"{gateway_url}/s/{self.id}/v1"
        self.client = client
        self.model = model
        self.sampling_args: dict[str, Any] = {k: v for k, v in (sampling_args or {}).items() if k != "n"}
        self.limits = limits
        self.loop = loop
        self.token_prompt = token_prompt
        self.calls: list[GatewayCall] = []
        self.truncated = False
        self.stop_reason: str | None = None
        """Why the gateway ended the rollout: "prompt_too_long", "max_turns" (call budget), "length"."""
        self.closed = False
        self.want_tokens = True
        self.responses: dict[str, Any] = {}
        """Responses API objects of this session by id (``previous_response_id``), see `dialects.responses`."""
        self._last: tuple[str, asyncio.Future[tuple[Reply, GatewayCall | None]]] | None = None
        self._inflight: set[Any] = set()  # upstream calls running now (concurrent futures or gateway-loop tasks)

    # -- what the environment reads back
    @property
    def sampled_tokens(self) -> int:
        return sum(len(c.tokens.completion_ids) for c in self.calls if c.tokens is not None)

    def turn_tokens(self) -> list[TurnTokens]:
        """The calls' token records in arrival order (calls that failed have none)."""
        return [c.tokens for c in sorted(self.calls, key=lambda c: c.seq) if c.tokens is not None]

    def env_vars(self) -> dict[str, str]:
        """What a program needs to reach this session with an OpenAI or Anthropic SDK.

        The Anthropic SDKs append ``/v1/messages`` to ``ANTHROPIC_BASE_URL``, so it stops before ``/v1``.
        """
        return {
            "OPENAI_BASE_URL": self.base_url,
            "OPENAI_API_BASE": self.base_url,
            "OPENAI_API_KEY": self.secret,
            "OPENAI_MODEL": self.model,
            "ANTHROPIC_BASE_URL": self.base_url.removesuffix("/v1"),
            "ANTHROPIC_API_KEY": self.secret,
        }

    # -- serving (runs on the gateway's thread)
    async def handle(self, body: dict[str, Any], retry_count: int, raw: bytes, render: Render | None = None) -> Reply:
        """Answer one ``POST /chat/completions``; an SDK retry of the last body replays its answer.

        Only a request marked as a retry (``x-stainless-retry-count`` > 0) with the same body is
        replayed: an unmarked identical body is a new turn (a program may ask the same twice).
        A retry of a call that failed is sampled again, so the program's retry policy works.
        ``render`` makes the chat answer another dialect's (``body`` is then the translated chat
        request and ``raw`` the program's own bytes); a replay gets the rendered answer again.
        """
        key = _body_key(raw)
        last = self._last
        if retry_count > 0 and last is not None and last[0] == key:
            (status, payload), call = await asyncio.shield(last[1])
            if status == 200 and call is not None:
                call.retries_replayed += 1
                return status, payload
        future: asyncio.Future[tuple[Reply, GatewayCall | None]] = asyncio.get_running_loop().create_future()
        self._last = (key, future)
        try:
            reply, call = await self._answer(body)
            if render is not None:
                reply = render(reply, call)
        except BaseException as exc:
            future.set_result(((500, error_body(f"gateway error: {exc}", "server_error")), None))
            raise
        future.set_result((reply, call))
        return reply

    def _over_budget(self) -> str | None:
        if self.stop_reason in ("max_turns", "length"):
            return f"rollout stopped: {self._budget_text()}"
        lim = self.limits
        if lim.max_calls is not None and len(self.calls) >= lim.max_calls:
            self.stop_reason = "max_turns"
        elif lim.max_tokens is not None and self.sampled_tokens >= lim.max_tokens:
            self.stop_reason = "length"
        else:
            return None
        return f"rollout stopped: {self._budget_text()}"

    def _budget_text(self) -> str:
        if self.stop_reason == "max_turns":
            return f"the call budget of {self.limits.max_calls} model calls is used up"
        return f"the token budget of {self.limits.max_tokens} sampled tokens is used up"

    def _upstream_args(self, body: dict[str, Any]) -> dict[str, Any]:
        args: dict[str, Any] = {**self.sampling_args, **program_args(body)}
        extra = dict(args.pop("extra_body", None) or {})
        if self.want_tokens:
            args["logprobs"] = True
            extra["return_token_ids"] = True
        if extra:
            args["extra_body"] = extra
        if self.limits.max_tokens is not None:
            left = self.limits.max_tokens - self.sampled_tokens
            asked = args.get("max_completion_tokens") or args.get("max_tokens") or left
            args.pop("max_completion_tokens", None)
            args["max_tokens"] = max(1, min(int(asked), left))
        return args

    async def _answer(self, body: dict[str, Any]) -> tuple[Reply, GatewayCall | None]:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return (400, error_body("'messages' must be a non-empty list of chat messages", code="invalid_messages")), None
        if (stopped := self._over_budget()) is not None:
            return (400, error_body(stopped, code="rollout_stopped")), None
        tools = body.get("tools") or None
        # model_construct: the fields are ours or the program's JSON; validating every message costs per call
        call = GatewayCall.model_construct(seq=len(self.calls), started=time.time(), messages=messages, tools=tools,
                                           ended=0.0, reply=None, tokens=None, finish_reason=None, status=0,
                                           error=None, tool_choice=body.get("tool_choice"), token_in=False,
                                           plain_reason=None, retries_replayed=0)
        self.calls.append(call)
        try:
            response = await self._sample(call, messages, tools, self._upstream_args(body))
        except OverlongPromptError as exc:
            self.truncated, self.stop_reason = True, "prompt_too_long"
            return self._failed(call, 400, error_body(
                f"This model's maximum context length is exceeded: {exc}", code="context_length_exceeded"))
        except RateLimitError as exc:
            return self._failed(call, 429, error_body(str(exc), "rate_limit_error"))
        except ModelTimeoutError as exc:
            return self._failed(call, 504, error_body(f"upstream timed out: {exc}", "server_error"))
        except ServerError as exc:
            return self._failed(call, _status_of(exc, 502), error_body(str(exc), "server_error"))
        except BadRequestError as exc:
            return self._failed(call, _status_of(exc, 400), error_body(str(exc)))
        except ModelError as exc:
            return self._failed(call, 502, error_body(f"{type(exc).__name__}: {exc}", "server_error"))
        payload = reply_json(response, self.model, keep_logprobs=bool(body.get("logprobs")))
        call.reply = payload["choices"][0]["message"]
        call.tokens = response.tokens
        if call.tokens is not None and (call.token_in or call.plain_reason is not None):
            follow_up = call.token_in or call.plain_reason not in NOT_FOLLOW_UPS
            call.tokens = call.tokens.model_copy(update={"token_in": call.token_in, "follow_up": follow_up})
        call.finish_reason = response.finish_reason
        call.status, call.ended = 200, time.time()
        return (200, payload), call

    @staticmethod
    def _failed(call: GatewayCall, status: int, payload: dict[str, Any]) -> tuple[Reply, GatewayCall]:
        call.status, call.error, call.ended = status, payload["error"]["message"], time.time()
        return (status, payload), call

    async def _sample(
        self, call: GatewayCall, messages: list[dict[str, Any]], tools: Any, args: dict[str, Any]
    ) -> ModelResponse:
        """One upstream call: here when the client works on any loop, else on the rollout's loop
        (where the client lives). The hop to another thread costs a GIL hand-over per call."""
        if getattr(self.client, "any_loop", False):
            running: Any = asyncio.ensure_future(self._upstream(call, messages, tools, args))
            waiter: Any = running
        else:
            try:
                running = asyncio.run_coroutine_threadsafe(self._upstream(call, messages, tools, args), self.loop)
            except RuntimeError as exc:  # the rollout's loop is closed: the rollout is over
                raise ServerError(f"the rollout owning this session has ended ({exc})") from exc
            waiter = asyncio.wrap_future(running)
        self._inflight.add(running)
        try:
            return await waiter
        except asyncio.CancelledError:
            if self.closed:  # cancelled by `cancel_upstream`: the rollout ended while the model was busy
                raise ServerError("the rollout owning this session has ended") from None
            raise
        finally:
            self._inflight.discard(running)

    def cancel_upstream(self) -> None:
        """Cancel the upstream calls still running (from any thread): the rollout has ended (the
        program timed out or exited), so nobody will read their answers, and closing their HTTP
        requests lets the inference server stop generating them. Without it a run whose programs
        time out leaves the server busy with the dead rollouts' calls, and the next ones wait."""
        for running in list(self._inflight):
            if isinstance(running, asyncio.Future):
                running.get_loop().call_soon_threadsafe(running.cancel)
            else:
                running.cancel()

    async def _upstream(
        self, call: GatewayCall, messages: list[dict[str, Any]], tools: Any, args: dict[str, Any]
    ) -> ModelResponse:
        if self.token_prompt is not None and self.want_tokens:
            response = await self.token_prompt(self, messages, tools, args)
            if isinstance(response, str):
                call.plain_reason = response
            elif response is not None:
                call.token_in = True
                return response
        try:
            return await self.client.chat(self.model, messages, tools=tools, sampling_args=args)
        except BadRequestError as exc:
            # A hosted API that does not know vLLM's token fields: go on without token ids.
            if not self.want_tokens or "return_token_ids" not in str(exc):
                raise
            self.want_tokens = False
            args = {k: v for k, v in args.items() if k != "extra_body"}
            args.pop("logprobs", None)
            return await self.client.chat(self.model, messages, tools=tools, sampling_args=args)
