"""Talking to OpenAI-compatible servers (vLLM, the embedded server, hosted APIs).

Why the aiohttp transport: the openai SDK's default httpx transport spends
several milliseconds of CPU per request at high concurrency, which on a small
machine caps rollout throughput far below what the server can give. The SDK
ships an aiohttp transport (``openai.DefaultAioHttpClient``); `make_client`
uses it, and ``benchmarks/rollout_engine.py`` measures the difference.

Why the low-level ``client.post``: we keep the SDK's auth, headers, retries
(exponential backoff with jitter on 408/409/429/5xx and connection errors,
``retry-after`` honoured) and error classes, but skip building its pydantic
response objects, which both costs CPU and drops vLLM's token-id fields.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import weakref
from typing import Any, Protocol, runtime_checkable

import openai

from verifiers.clients.aiohttp_client import AiohttpChatClient
from verifiers.clients.base import RequestAdapter
from verifiers.clients.create_client import CreateMethodChatClient, has_chat_create
from verifiers.clients.errors import map_openai_error
from verifiers.clients.loop import _EPHEMERAL_CLIENTS, run_in_fresh_loop
from verifiers.clients.response import ModelResponse
from verifiers.types import Messages, SamplingArgs

# map_openai_error (clients/errors.py) and run_in_fresh_loop (clients/loop.py) keep this old path.
__all__ = [
    "ChatClient",
    "OpenAIChatClient",
    "SyncOpenAIChatClient",
    "as_chat_client",
    "can_take_fast_path",
    "get_model_response",
    "make_client",
    "map_openai_error",
    "run_in_fresh_loop",
]


def _http_module() -> Any:
    """The HTTP library the installed openai SDK is built on (httpx, or httpx2 in SDK 3.x)."""
    for name in ("httpx2", "httpx"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError("openai's HTTP library (httpx) is not installed")


def _pool_limits() -> Any:
    """Room for thousands of concurrent rollouts (the SDK default caps keep-alive at 100)."""
    return _http_module().Limits(max_connections=4096, max_keepalive_connections=1024)


def make_client(
    base_url: str | None = None,
    api_key: str | None = None,
    *,
    api_key_var: str = "OPENAI_API_KEY",
    timeout: float = 600.0,
    max_retries: int = 3,
    headers: dict[str, str] | None = None,
    transport: str = "aiohttp",
) -> openai.AsyncOpenAI:
    """Build an ``AsyncOpenAI`` client tuned for many concurrent rollouts.

    ``api_key`` wins over the variable named by ``api_key_var``; local servers
    that need no key get the placeholder ``"EMPTY"``. ``transport`` is
    ``"aiohttp"`` (default, fast) or ``"httpx"`` (the SDK default).
    """
    key = api_key if api_key is not None else os.environ.get(api_key_var) or "EMPTY"
    limits = _pool_limits()
    if transport == "aiohttp":
        http_client = openai.DefaultAioHttpClient(limits=limits, timeout=timeout)
    elif transport == "httpx":
        http_client = openai.DefaultAsyncHttpxClient(limits=limits, timeout=timeout)
    else:
        from verifiers.errors import ConfigError

        raise ConfigError(f"unknown transport {transport!r}: use 'aiohttp' or 'httpx'")
    return openai.AsyncOpenAI(
        base_url=base_url,
        api_key=key,
        timeout=timeout,
        max_retries=max_retries,
        default_headers=headers,
        http_client=http_client,
    )


@runtime_checkable
class ChatClient(Protocol):
    """What the rollout engine needs from a model client. Implemented for AsyncOpenAI,
    OpenAI (sync) and `verifiers.testing.ScriptedClient`. ``complete`` takes text or, for
    servers that accept them (vLLM, the embedded server), a list of token ids."""

    async def chat(
        self,
        model: str,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        sampling_args: SamplingArgs | None = None,
        timeout: float | None = None,
    ) -> ModelResponse: ...

    async def complete(
        self,
        model: str,
        prompt: str | list[int],
        *,
        sampling_args: SamplingArgs | None = None,
        timeout: float | None = None,
    ) -> ModelResponse: ...


class OpenAIChatClient(RequestAdapter):
    """`ChatClient` over an ``openai.AsyncOpenAI``."""

    any_loop = True  # a copy of the SDK client per event loop (`_for_this_loop`)

    def __init__(self, client: openai.AsyncOpenAI) -> None:
        self.client = client
        self._response_cls = _http_module().Response
        self._home_loop: weakref.ref[asyncio.AbstractEventLoop] | None = None
        self._copies: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, openai.AsyncOpenAI] = (
            weakref.WeakKeyDictionary()
        )

    def _for_this_loop(self) -> openai.AsyncOpenAI:
        loop = asyncio.get_running_loop()
        ephemeral = _EPHEMERAL_CLIENTS.get()
        if ephemeral is None:
            if self._home_loop is None or self._home_loop() is None:
                self._home_loop = weakref.ref(loop)
            if self._home_loop() is loop:
                return self.client
        copy = self._copies.get(loop)
        if copy is None:
            aiohttp_transport = isinstance(self.client._client, openai.DefaultAioHttpClient)
            fresh = openai.DefaultAioHttpClient if aiohttp_transport else openai.DefaultAsyncHttpxClient
            copy = self.client.copy(http_client=fresh(limits=_pool_limits()))
            self._copies[loop] = copy
            if ephemeral is not None:
                ephemeral.append(copy)
        return copy

    async def _post(self, path: str, body: dict[str, Any], timeout: float | None) -> dict[str, Any]:
        options: dict[str, Any] = {}
        if timeout is not None:
            options["timeout"] = timeout
        try:
            resp = await self._for_this_loop().post(path, cast_to=self._response_cls, body=body, options=options)  # type: ignore[arg-type]
            return json.loads(resp.content)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise map_openai_error(exc) from exc



class SyncOpenAIChatClient(RequestAdapter):
    """`ChatClient` over a synchronous ``openai.OpenAI`` (0.1.x scripts pass one).

    Each call runs in a worker thread; prefer ``AsyncOpenAI`` for throughput.
    """

    any_loop = True

    def __init__(self, client: openai.OpenAI) -> None:
        self.client = client
        self._response_cls = _http_module().Response

    def _post_sync(self, path: str, body: dict[str, Any], timeout: float | None) -> dict[str, Any]:
        options: dict[str, Any] = {"timeout": timeout} if timeout is not None else {}
        try:
            resp = self.client.post(path, cast_to=self._response_cls, body=body, options=options)  # type: ignore[arg-type]
            return json.loads(resp.content)
        except Exception as exc:
            raise map_openai_error(exc) from exc

    async def _post(self, path: str, body: dict[str, Any], timeout: float | None) -> dict[str, Any]:
        return await asyncio.to_thread(self._post_sync, path, body, timeout)


_ADAPTERS: weakref.WeakKeyDictionary[Any, ChatClient] = weakref.WeakKeyDictionary()


def _sdk_create_untouched(client: Any) -> bool:
    """True when ``client.chat.completions.create`` and ``client.completions.create`` are the
    SDK's own methods: nobody patched or wrapped them, so skipping them changes nothing."""
    from openai.resources.chat.completions import AsyncCompletions as AsyncChatCompletions
    from openai.resources.chat.completions import Completions as ChatCompletions
    from openai.resources.completions import AsyncCompletions, Completions

    try:
        chat_res, comp_res = client.chat.completions, client.completions
    except Exception:
        return False
    for res, classes in ((chat_res, (AsyncChatCompletions, ChatCompletions)), (comp_res, (AsyncCompletions, Completions))):
        if type(res) not in classes or "create" in vars(res):
            return False
    return True


def _no_proxy_for(url: str) -> bool:
    """The SDK's httpx client honours ``HTTP(S)_PROXY``; the fast path does not, so it is only
    taken when no proxy applies to this URL."""
    import urllib.parse
    import urllib.request

    proxies = urllib.request.getproxies()
    if not proxies:
        return True
    host = urllib.parse.urlsplit(url).hostname or ""
    return bool(urllib.request.proxy_bypass(host)) or host in ("127.0.0.1", "localhost", "::1")


def can_take_fast_path(client: Any) -> bool:
    """Whether an ``AsyncOpenAI`` can be served by `AiohttpChatClient` with identical behaviour.

    That holds for the plain SDK class (not a subclass, which may override request
    building, e.g. Azure), with the SDK's own default transport or the aiohttp one
    (a user-supplied ``httpx.AsyncClient`` may carry proxies, mounts or event hooks:
    left alone), a static API key (no key provider or workload identity), no default
    query parameters, no proxy, and untouched ``create`` methods.

    Why: the SDK's default httpx pool keeps only 100 idle connections and rescans
    its pool per request, which measured 0.54 latency efficiency at C=256 / 500 ms
    against 0.88 for `make_client` (benchmarks/rollout_engine.py).
    """
    if type(client) is not openai.AsyncOpenAI:
        return False
    from openai._base_client import AsyncHttpxClientWrapper

    transport = client._client
    if type(transport) is not AsyncHttpxClientWrapper and not isinstance(transport, openai.DefaultAioHttpClient):
        return False
    if getattr(client, "_api_key_provider", None) is not None or getattr(client, "workload_identity", None):
        return False
    if client._custom_query:
        return False
    return _no_proxy_for(str(client.base_url)) and _sdk_create_untouched(client)


def as_chat_client(client: Any) -> ChatClient:
    """Accept whatever a user passes as ``client`` and return a `ChatClient`.

    * a plain ``openai.AsyncOpenAI`` (built by `make_client` or by the user with the SDK
      defaults): the aiohttp fast path, same URL, key, headers, timeout and retries;
    * any other ``AsyncOpenAI`` (custom ``http_client``, subclasses): through the SDK;
    * a plain sync ``openai.OpenAI``: the SDK in a worker thread;
    * a `ChatClient`: used as is;
    * anything else with ``chat.completions.create`` (wrappers, mocks, clients whose
      ``create`` was patched for instrumentation): that ``create`` is called, as 0.1.x did.
    """
    if isinstance(client, RequestAdapter):  # ours already (the common case: a cheap class check first)
        return client
    if isinstance(client, (openai.AsyncOpenAI, openai.OpenAI)) and _sdk_create_untouched(client):
        adapter = _ADAPTERS.get(client)
        if adapter is None:
            if isinstance(client, openai.OpenAI):
                adapter = SyncOpenAIChatClient(client)
            elif can_take_fast_path(client):
                adapter = AiohttpChatClient.from_openai(client)  # same behaviour, less CPU per request
            else:
                adapter = OpenAIChatClient(client)
            _ADAPTERS[client] = adapter
        return adapter
    if has_chat_create(client):  # before the protocol check: a Mock also "has" chat/complete
        return CreateMethodChatClient(client)
    if isinstance(client, ChatClient):
        return client
    from verifiers.errors import ConfigError

    raise ConfigError(
        "client must be openai.AsyncOpenAI, openai.OpenAI, a verifiers ChatClient or an object with "
        f"chat.completions.create, got {type(client).__name__}; build one with verifiers.make_client(base_url=...)"
    )


async def get_model_response(
    client: ChatClient,
    model: str,
    prompt: Messages,
    *,
    tools: list[dict[str, Any]] | None = None,
    sampling_args: SamplingArgs | None = None,
    timeout: float | None = None,
) -> ModelResponse:
    """One model call in chat (list prompt) or completion (string prompt) mode."""
    if isinstance(prompt, str):
        return await client.complete(model, prompt, sampling_args=sampling_args, timeout=timeout)
    return await client.chat(model, prompt, tools=tools, sampling_args=sampling_args, timeout=timeout)
