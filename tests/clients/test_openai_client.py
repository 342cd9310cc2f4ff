"""The client layer over real HTTP: transport, error mapping, request bodies."""

from __future__ import annotations

import socket

import httpx2 as httpx  # the HTTP library of the installed openai SDK
import openai
import pytest

import verifiers as vf
from verifiers.clients import as_chat_client, get_model_response, map_openai_error
from verifiers.errors import (
    BadRequestError,
    EmptyResponseError,
    ModelError,
    ModelTimeoutError,
    OverlongPromptError,
    RateLimitError,
    ServerError,
)
from verifiers.testing import ScriptedReply, ScriptedServer, ScriptedToolCall, ServerScript

USER = [{"role": "user", "content": "hello"}]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_make_client_uses_aiohttp_transport(server: ScriptedServer) -> None:
    client = vf.make_client(server.base_url, max_retries=2, timeout=12.0)
    assert isinstance(client, openai.AsyncOpenAI)
    assert isinstance(client._client, openai.DefaultAioHttpClient)
    assert client.max_retries == 2
    assert str(client.base_url).rstrip("/") == server.base_url
    await client.close()


async def test_make_client_httpx_transport_and_bad_transport(server: ScriptedServer) -> None:
    client = vf.make_client(server.base_url, transport="httpx", max_retries=0)
    assert not isinstance(client._client, openai.DefaultAioHttpClient)
    res = await as_chat_client(client).chat("m", USER)
    assert res.content == "hello"
    await client.close()
    with pytest.raises(vf.ConfigError, match="transport"):
        vf.make_client(server.base_url, transport="carrier-pigeon")


def test_make_client_api_key_resolution(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("MY_KEY", "from-env")
    assert vf.make_client("http://127.0.0.1:1/v1").api_key == "EMPTY"
    assert vf.make_client("http://127.0.0.1:1/v1", api_key_var="MY_KEY").api_key == "from-env"
    assert (
        vf.make_client("http://127.0.0.1:1/v1", api_key="explicit", api_key_var="MY_KEY").api_key
        == "explicit"
    )


async def test_chat_over_http_and_tools_in_body(server: ScriptedServer, client) -> None:
    server.set_script(
        ServerScript(replies=[ScriptedReply(tool_calls=[ScriptedToolCall(name="f", arguments='{"x": 1}')])])
    )
    tools = [
        {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}
    ]
    res = await as_chat_client(client).chat("m", USER, tools=tools, sampling_args={"temperature": 0.5})
    assert res.finish_reason == "tool_calls"
    assert res.tool_calls[0]["function"] == {"name": "f", "arguments": '{"x": 1}'}
    assert res.to_message()["tool_calls"] == res.tool_calls
    body = server.requests[-1]
    assert body["tools"] == tools
    assert body["temperature"] == 0.5
    assert body["messages"] == USER


async def test_extra_body_is_flattened(server: ScriptedServer, client) -> None:
    await as_chat_client(client).chat(
        "m",
        USER,
        sampling_args={
            "max_tokens": 10,
            "extra_body": {"top_k": 20, "skip_special_tokens": False, "dropped": None},
        },
    )
    body = server.requests[-1]
    assert body["top_k"] == 20
    assert body["skip_special_tokens"] is False
    assert body["max_tokens"] == 10
    assert "extra_body" not in body
    assert "dropped" not in body


async def test_completion_endpoint(server: ScriptedServer, client) -> None:
    res = await get_model_response(as_chat_client(client), "m", "plain prompt")
    assert res.content == "plain prompt"
    assert server.requests[-1]["prompt"] == "plain prompt"


async def test_connection_refused_is_server_error() -> None:
    client = vf.make_client(f"http://127.0.0.1:{closed_port()}/v1", max_retries=0)
    try:
        with pytest.raises(ServerError, match="connection"):
            await as_chat_client(client).chat("m", USER)
    finally:
        await client.close()


async def test_connection_refused_is_server_error_with_httpx_transport() -> None:
    client = vf.make_client(f"http://127.0.0.1:{closed_port()}/v1", max_retries=0, transport="httpx")
    try:
        with pytest.raises(ServerError, match="connection"):
            await as_chat_client(client).chat("m", USER)
    finally:
        await client.close()


async def test_connection_refused_is_a_model_error_in_rollout(rows) -> None:
    """Whatever its exact class, a dead server is a model-side failure recorded per rollout."""
    client = vf.make_client(f"http://127.0.0.1:{closed_port()}/v1", max_retries=0)
    env = vf.SingleTurnEnv(dataset=rows)
    out = await env.a_evaluate(client, "m")
    assert [r.error.where for r in out.results] == ["model"] * 3
    assert out.stop_reason == ["error"] * 3
    await client.close()


async def test_connection_refused_in_rollout_is_server_error(rows) -> None:
    client = vf.make_client(f"http://127.0.0.1:{closed_port()}/v1", max_retries=0)
    env = vf.SingleTurnEnv(dataset=rows)
    out = await env.a_evaluate(client, "m")
    await client.close()
    assert [r.error.type for r in out.results] == ["ServerError"] * 3


@pytest.mark.timeout(20)
async def test_request_timeout_is_model_timeout_error(server: ScriptedServer) -> None:
    server.set_script(ServerScript(latency_s=3))
    client = vf.make_client(server.base_url, max_retries=0, timeout=0.3)
    with pytest.raises(ModelTimeoutError):
        await as_chat_client(client).chat("m", USER)
    # A per-call timeout also works.
    client2 = vf.make_client(server.base_url, max_retries=0)
    with pytest.raises(ModelTimeoutError):
        await as_chat_client(client2).chat("m", USER, timeout=0.3)
    await client.close()
    await client2.close()


async def test_400_is_bad_request(server: ScriptedServer, client) -> None:
    server.set_script(ServerScript(error_rate=1.0, error_statuses=[400]))
    with pytest.raises(BadRequestError):
        await as_chat_client(client).chat("m", USER)


async def test_overlong_is_overlong_prompt_error(server: ScriptedServer, client) -> None:
    server.set_script(ServerScript(context_length=5))
    with pytest.raises(OverlongPromptError, match="maximum context length"):
        await as_chat_client(client).chat("m", USER)
    # OverlongPromptError is a ModelError, so generic handlers still see a model failure.
    assert issubclass(OverlongPromptError, ModelError)


async def test_429_and_500_mapping(server: ScriptedServer, client) -> None:
    server.set_script(ServerScript(error_rate=1.0, error_statuses=[429]))
    with pytest.raises(RateLimitError):
        await as_chat_client(client).chat("m", USER)
    server.set_script(ServerScript(error_rate=1.0, error_statuses=[503]))
    with pytest.raises(ServerError):
        await as_chat_client(client).chat("m", USER)


def _status_error(cls: type[openai.APIStatusError], status: int, message: str) -> openai.APIStatusError:
    request = httpx.Request("POST", "http://x/v1/chat/completions")
    response = httpx.Response(status, request=request, json={"error": {"message": message}})
    return cls(message, response=response, body={"error": {"message": message}})


def test_map_openai_error_unit() -> None:
    request = httpx.Request("POST", "http://x/v1/chat/completions")
    assert isinstance(map_openai_error(openai.APITimeoutError(request=request)), ModelTimeoutError)
    assert isinstance(map_openai_error(openai.APIConnectionError(request=request)), ServerError)
    assert isinstance(
        map_openai_error(_status_error(openai.RateLimitError, 429, "slow down")), RateLimitError
    )
    assert isinstance(map_openai_error(_status_error(openai.InternalServerError, 500, "boom")), ServerError)
    assert isinstance(
        map_openai_error(_status_error(openai.BadRequestError, 400, "bad field")), BadRequestError
    )
    assert isinstance(map_openai_error(_status_error(openai.NotFoundError, 404, "no model")), BadRequestError)
    overlong = _status_error(
        openai.BadRequestError,
        400,
        "This model's maximum context length is 10 tokens. However, you requested 20",
    )
    assert isinstance(map_openai_error(overlong), OverlongPromptError)
    assert isinstance(
        map_openai_error(_status_error(openai.BadRequestError, 400, "context_length_exceeded")),
        OverlongPromptError,
    )
    import json

    assert isinstance(map_openai_error(json.JSONDecodeError("x", "doc", 0)), EmptyResponseError)
    already = ServerError("mine")
    assert map_openai_error(already) is already
    assert type(map_openai_error(RuntimeError("other"))) is ModelError


def test_as_chat_client_adapters(server: ScriptedServer) -> None:
    aclient = vf.make_client(server.base_url)
    adapter = as_chat_client(aclient)
    assert as_chat_client(aclient) is adapter  # cached per client
    assert isinstance(adapter, vf.ChatClient)
    sync_client = openai.OpenAI(base_url=server.base_url, api_key="x")
    assert isinstance(as_chat_client(sync_client), vf.ChatClient)
    assert as_chat_client(adapter) is adapter
    with pytest.raises(vf.ConfigError):
        as_chat_client(object())
    sync_client.close()


@pytest.mark.timeout(20)
def test_sync_evaluate_keeps_client_timeout_and_retries(server: ScriptedServer) -> None:
    """The sync path uses per-loop copies of the client: they must keep its timeout and retries."""
    env = vf.SingleTurnEnv(dataset=[{"question": "a"}])
    server.set_script(ServerScript(latency_s=3))
    out = env.evaluate(vf.make_client(server.base_url, max_retries=0, timeout=0.3), "m")
    assert out.results[0].error.type == "ModelTimeoutError"
    assert out.results[0].timing.generation_s < 2
    server.set_script(ServerScript(fail_first=2))
    server.reset()
    out = env.evaluate(vf.make_client(server.base_url, max_retries=2), "m")
    assert out.error == [None]
    assert server.n_requests == 3
