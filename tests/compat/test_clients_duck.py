"""0.1.x clients: any object with ``chat.completions.create`` (wrappers, mocks, sync
``openai.OpenAI``), and a user-built ``AsyncOpenAI`` on the SDK defaults taking the fast path
with its URL, key, headers, timeout and retries intact. Real HTTP on 127.0.0.1 throughout."""

from __future__ import annotations

import asyncio
import json
import types
from typing import Any
from unittest import mock

import openai
import pytest
from aiohttp import web

import verifiers as vf
from verifiers.clients import AiohttpChatClient, as_chat_client
from verifiers.clients.create_client import CreateMethodChatClient
from verifiers.clients.openai_client import OpenAIChatClient, SyncOpenAIChatClient
from verifiers.testing import ScriptedServer, ServerScript

ROWS = [{"question": "alpha", "answer": "alpha"}, {"question": "beta", "answer": "beta"}]


def exact(completion, answer) -> float:
    return 1.0 if completion and completion[-1]["content"] == answer else 0.0


def make_env(**kw: Any) -> vf.SingleTurnEnv:
    return vf.SingleTurnEnv(dataset=[dict(r) for r in ROWS], rubric=vf.Rubric(funcs=[exact]), **kw)


class CountingWrapper:
    """A 0.1.x-style wrapper: instruments every call, forwards to a real AsyncOpenAI."""

    def __init__(self, inner: openai.AsyncOpenAI) -> None:
        self.inner = inner
        self.calls: list[dict[str, Any]] = []
        self.chat = types.SimpleNamespace(completions=types.SimpleNamespace(create=self._chat_create))
        self.completions = types.SimpleNamespace(create=self._completion_create)

    async def _chat_create(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        return await self.inner.chat.completions.create(**kwargs)

    async def _completion_create(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        return await self.inner.completions.create(**kwargs)


async def test_wrapper_create_is_called_with_0_1_x_arguments(server: ScriptedServer) -> None:
    inner = openai.AsyncOpenAI(base_url=server.base_url, api_key="x", max_retries=0)
    wrapper = CountingWrapper(inner)
    assert isinstance(as_chat_client(wrapper), CreateMethodChatClient)
    out = await make_env().a_generate(
        make_env().dataset, wrapper, "m", sampling_args={"temperature": 0.3, "extra_body": {"top_k": 5}}
    )
    assert out.reward == [1.0, 1.0]
    assert len(wrapper.calls) == 2 and server.n_requests == 2
    call = wrapper.calls[0]
    assert call["model"] == "m" and call["messages"][-1]["role"] == "user"
    assert call["temperature"] == 0.3 and call["extra_body"] == {"top_k": 5}  # passed as 0.1.x did
    assert server.requests[0]["top_k"] == 5  # ... and the SDK merged it into the body
    await inner.close()


async def test_wrapper_completion_mode_calls_completions_create(server: ScriptedServer) -> None:
    inner = openai.AsyncOpenAI(base_url=server.base_url, api_key="x", max_retries=0)
    wrapper = CountingWrapper(inner)
    env = vf.SingleTurnEnv(
        dataset=[{"prompt": "gamma", "answer": "gamma"}],
        message_type="completion",
        rubric=vf.Rubric(funcs=[lambda completion, answer: float(completion == answer)]),
    )
    out = await env.a_generate(env.dataset, wrapper, "m")
    assert out.completion == ["gamma"] and out.reward == [1.0]
    # 0.1.x's default sampling_args ({"n": 1, "extra_body": {}}) are passed on, as upstream does
    assert wrapper.calls == [{"model": "m", "prompt": "gamma", "n": 1, "extra_body": {}}]


def test_mock_client_sync_create_and_dict_responses() -> None:
    """A MagicMock(spec=AsyncOpenAI) passes isinstance checks; its own create must still be called."""
    reply = types.SimpleNamespace(
        choices=[
            types.SimpleNamespace(
                message=types.SimpleNamespace(role="assistant", content="alpha", tool_calls=None),
                finish_reason="stop",
            )
        ],
        usage=None,
    )
    client = mock.MagicMock(spec=openai.AsyncOpenAI)
    client.chat.completions.create = mock.AsyncMock(return_value=reply)
    adapter = as_chat_client(client)
    assert isinstance(adapter, CreateMethodChatClient)
    out = make_env().evaluate(client, "m", num_examples=1)
    assert out.completion[0][-1]["content"] == "alpha" and out.reward == [1.0]
    client.chat.completions.create.assert_awaited_once()

    calls: list[str] = []

    def sync_create(**kwargs: Any) -> dict[str, Any]:  # a plain sync function returning a dict
        calls.append(kwargs["model"])
        return {"choices": [{"message": {"role": "assistant", "content": "beta"}, "finish_reason": "stop"}]}

    duck = types.SimpleNamespace(chat=types.SimpleNamespace(completions=types.SimpleNamespace(create=sync_create)))
    out = make_env().evaluate(duck, "m2", num_examples=2)
    assert calls == ["m2", "m2"] and out.reward == [0.0, 1.0]


def test_sync_openai_client_and_patched_create(server: ScriptedServer) -> None:
    sync = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
    assert isinstance(as_chat_client(sync), SyncOpenAIChatClient)
    assert make_env().evaluate(sync, "m").reward == [1.0, 1.0]
    seen: list[str] = []
    original = sync.chat.completions.create

    def traced(**kwargs: Any) -> Any:
        seen.append(kwargs["messages"][-1]["content"])
        return original(**kwargs)

    sync.chat.completions.create = traced  # instrumented in place, as tracing libraries do
    assert isinstance(as_chat_client(sync), CreateMethodChatClient)
    assert make_env().evaluate(sync, "m").reward == [1.0, 1.0]
    assert sorted(seen) == ["alpha", "beta"]
    sync.close()


def test_wrapper_errors_are_recorded_on_the_rollout(server: ScriptedServer) -> None:
    server.set_script(ServerScript(fail_first=10, fail_first_status=500))
    inner = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
    duck = types.SimpleNamespace(chat=types.SimpleNamespace(completions=types.SimpleNamespace(create=inner.chat.completions.create)))
    out = make_env().evaluate(duck, "m", num_examples=1)
    assert out.results[0].error is not None and out.results[0].error.type == "ServerError"
    inner.close()


def test_not_a_client_is_refused_by_name() -> None:
    with pytest.raises(vf.ConfigError, match=r"chat\.completions\.create"):
        as_chat_client(object())


# -- the plain AsyncOpenAI fast path ---------------------------------------------------------------


class HeaderServer:
    """A minimal OpenAI-compatible endpoint that records request headers and URLs."""

    def __init__(self, fail_first: int = 0, delay_s: float = 0.0) -> None:
        self.seen: list[dict[str, str]] = []
        self.paths: list[str] = []
        self.fail_first = fail_first
        self.delay_s = delay_s

    async def handle(self, request: web.Request) -> web.Response:
        self.seen.append(dict(request.headers))
        self.paths.append(str(request.rel_url))
        body = await request.json()
        if self.fail_first > 0:
            self.fail_first -= 1
            return web.json_response({"error": {"message": "try again"}}, status=503)
        await asyncio.sleep(self.delay_s)
        text = body["messages"][-1]["content"]
        return web.json_response(
            {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
             "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}
        )

    async def __aenter__(self) -> str:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.handle)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        return f"http://127.0.0.1:{self.runner.addresses[0][1]}/v1"

    async def __aexit__(self, *exc: object) -> None:
        await self.runner.cleanup()


async def test_plain_async_openai_takes_fast_path_with_its_settings() -> None:
    hs = HeaderServer(fail_first=1)
    async with hs as url:
        user = openai.AsyncOpenAI(
            base_url=url, api_key="sk-user", default_headers={"X-Team": "rl"}, timeout=7.0, max_retries=2,
            organization="org-1",
        )
        adapter = as_chat_client(user)
        assert isinstance(adapter, AiohttpChatClient)
        assert adapter.base_url == url and adapter.timeout == 7.0 and adapter.max_retries == 2
        out = await make_env().a_generate(make_env().dataset, user, "m")
        assert out.reward == [1.0, 1.0]  # the 503 was retried, as the SDK would
        for headers in hs.seen:
            assert headers["Authorization"] == "Bearer sk-user"
            assert headers["X-Team"] == "rl" and headers["OpenAI-Organization"] == "org-1"
        assert all(p == "/v1/chat/completions" for p in hs.paths)
        # the user's client itself is untouched and still works outside our calls
        assert type(user._client).__name__ == "AsyncHttpxClientWrapper"
        resp = await user.chat.completions.create(model="m", messages=[{"role": "user", "content": "own"}])
        assert resp.choices[0].message.content == "own"
        await user.close()


async def test_plain_client_timeout_is_kept() -> None:
    async with HeaderServer(delay_s=2.0) as url:
        user = openai.AsyncOpenAI(base_url=url, api_key="k", timeout=0.3, max_retries=0)
        out = await make_env().a_generate(make_env().dataset.subset(1), user, "m")
        assert out.results[0].error.type == "ModelTimeoutError"
        await user.close()


async def test_clients_the_fast_path_must_leave_to_the_sdk(server: ScriptedServer, monkeypatch) -> None:
    import httpx2 as httpx

    own_http = openai.AsyncOpenAI(base_url=server.base_url, api_key="x", http_client=httpx.AsyncClient())
    assert isinstance(as_chat_client(own_http), OpenAIChatClient)  # user transport: proxies, hooks, mounts

    class MyClient(openai.AsyncOpenAI):
        pass

    assert isinstance(as_chat_client(MyClient(base_url=server.base_url, api_key="x")), OpenAIChatClient)
    query = openai.AsyncOpenAI(base_url=server.base_url, api_key="x", default_query={"api-version": "1"})
    assert isinstance(as_chat_client(query), OpenAIChatClient)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    remote = openai.AsyncOpenAI(base_url="https://api.example.com/v1", api_key="x")
    assert isinstance(as_chat_client(remote), OpenAIChatClient)
    assert isinstance(as_chat_client(openai.AsyncOpenAI(base_url=server.base_url, api_key="x")), AiohttpChatClient)
    out = await make_env().a_generate(make_env().dataset, own_http, "m")
    assert out.reward == [1.0, 1.0]
    for c in (own_http, query, remote):
        await c.close()


def test_create_kwargs_json_serialisable_through_real_sdk(server: ScriptedServer) -> None:
    """Tools go to create() in the OpenAI shape; the server sees them."""

    def add(a: int, b: int) -> int:
        """Add.

        Args:
            a: first
            b: second
        """
        return a + b

    inner = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
    seen: list[Any] = []

    def create(**kw: Any) -> Any:
        seen.append(kw.get("tools"))
        return inner.chat.completions.create(**kw)

    duck = types.SimpleNamespace(chat=types.SimpleNamespace(completions=types.SimpleNamespace(create=create)))
    env = vf.ToolEnv(tools=[add], dataset=[{"question": "q", "answer": "q"}], max_turns=2)
    env.evaluate(duck, "m")
    assert seen[0][0]["function"]["name"] == "add"
    assert json.dumps(server.requests[0]["tools"])
    inner.close()
