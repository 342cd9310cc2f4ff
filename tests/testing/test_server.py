"""The scripted server, exercised through the official openai client over real HTTP."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from verifiers.testing import (
    ScriptedReply,
    ScriptedServer,
    ScriptedToolCall,
    ServerScript,
    SpawnedServer,
)

USER = [{"role": "user", "content": "hello"}]


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as srv:
        yield srv


def client(srv: ScriptedServer | SpawnedServer, **kwargs: object) -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.base_url, api_key="test", **kwargs)  # type: ignore[arg-type]


def aclient(srv: ScriptedServer, **kwargs: object) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=srv.base_url, api_key="test", **kwargs)  # type: ignore[arg-type]


def rendered(messages: list[dict[str, str]]) -> str:
    return "".join(f"<|{m['role']}|>{m['content']}\n" for m in messages) + "<|assistant|>"


# -- replies -----------------------------------------------------------------------------


def test_echo_reply_and_usage(server: ScriptedServer) -> None:
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]
    resp = client(server).chat.completions.create(model="anything", messages=messages)  # type: ignore[arg-type]
    choice = resp.choices[0]
    assert choice.message.content == "hello"
    assert choice.message.role == "assistant"
    assert choice.finish_reason == "stop"
    assert resp.model == "scripted"
    assert resp.object == "chat.completion"
    assert resp.usage is not None
    assert resp.usage.prompt_tokens == len(rendered(messages))
    assert resp.usage.completion_tokens == len("hello")
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + 5
    assert server.requests == [{"model": "anything", "messages": messages}]


def test_placeholders_are_single_pass_and_brace_safe() -> None:
    template = 'u={last_user} r={reversed_last_user} m={last_message} t={turn} {"json": {}} {0} {{x}}'
    messages = [
        {"role": "user", "content": "{turn}"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "abc"},
        {"role": "assistant", "content": "ok"},
        {"role": "tool", "content": "{last_user}"},
    ]
    with ScriptedServer(ServerScript(replies=[ScriptedReply(content=template)])) as srv:
        resp = client(srv).chat.completions.create(model="m", messages=messages)  # type: ignore[arg-type]
    expected = 'u=abc r=cba m={last_user} t=2 {"json": {}} {0} {{x}}'
    assert resp.choices[0].message.content == expected


def test_content_parts_are_joined(server: ScriptedServer) -> None:
    parts = [{"type": "text", "text": "hel"}, {"type": "image_url", "image_url": {"url": "x"}}]
    parts.append({"type": "text", "text": "lo"})
    resp = client(server).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": parts}],  # type: ignore[list-item]
    )
    assert resp.choices[0].message.content == "hello"


def test_first_matching_rule_wins_and_last_is_fallback() -> None:
    script = ServerScript(
        replies=[
            ScriptedReply(match=r"weather in \w+", content="sunny"),
            ScriptedReply(turn=1, content="second turn"),
            ScriptedReply(turn=1, match="never", content="unreachable"),
            ScriptedReply(content="fallback {turn}"),
        ]
    )
    with ScriptedServer(script) as srv:
        c = client(srv)

        def ask(messages: list[dict[str, str]]) -> str | None:
            resp = c.chat.completions.create(model="m", messages=messages)  # type: ignore[arg-type]
            return resp.choices[0].message.content

        assert ask([{"role": "user", "content": "the weather in Paris?"}]) == "sunny"
        assert ask([{"role": "user", "content": "hi"}]) == "fallback 0"
        second = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x"}]
        assert ask([*second, {"role": "user", "content": "again"}]) == "second turn"
        # match beats turn because it comes first
        assert ask([*second, {"role": "user", "content": "weather in Rome"}]) == "sunny"
        assert ask([*second, *second, {"role": "user", "content": "more"}]) == "fallback 2"


async def test_tool_calls_pass_malformed_arguments_raw() -> None:
    broken = '{"city": "Paris",,'
    script = ServerScript(
        replies=[
            ScriptedReply(turn=0, tool_calls=[ScriptedToolCall(name="get_weather", arguments=broken)]),
            ScriptedReply(content="done after {last_message}"),
        ]
    )
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    async with ScriptedServer(script) as srv, aclient(srv) as c:
        first = await c.chat.completions.create(model="m", messages=USER, tools=tools)  # type: ignore[arg-type]
        choice = first.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert choice.message.content is None
        assert choice.message.tool_calls is not None
        (call,) = choice.message.tool_calls
        assert call.type == "function"
        assert call.id.startswith("call_")
        assert call.function.name == "get_weather"
        assert call.function.arguments == broken

        messages = [
            *USER,
            choice.message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "12C"},
        ]
        second = await c.chat.completions.create(model="m", messages=messages, tools=tools)  # type: ignore[arg-type]
        assert second.choices[0].message.content == "done after 12C"
        assert srv.requests[-1]["tools"] == tools


def test_token_ids_and_logprobs_via_model_extra(server: ScriptedServer) -> None:
    resp = client(server).chat.completions.create(
        model="m", messages=USER, logprobs=True, extra_body={"return_token_ids": True}
    )
    choice = resp.choices[0]
    # vLLM's extra fields are not declared on the openai models: they land in model_extra.
    assert resp.model_extra is not None and choice.model_extra is not None
    assert resp.model_extra["prompt_token_ids"] == [ord(ch) for ch in rendered(USER)]
    assert choice.model_extra["token_ids"] == [ord(ch) for ch in "hello"]
    assert choice.logprobs is not None and choice.logprobs.content is not None
    tokens = choice.logprobs.content
    assert [t.token for t in tokens] == list("hello")
    assert all(t.logprob < 0 and t.bytes == list(t.token.encode()) for t in tokens)
    again = client(server).chat.completions.create(model="m", messages=USER, logprobs=True)
    assert again.choices[0].logprobs is not None
    assert [t.logprob for t in again.choices[0].logprobs.content or []] == [t.logprob for t in tokens]
    assert "token_ids" not in (again.choices[0].model_extra or {})


async def test_tool_call_turn_prompt_extends_previous_prompt_and_completion() -> None:
    """Token-level consistency across turns, as with a real chat template."""
    script = ServerScript(
        replies=[
            ScriptedReply(
                turn=0, content="let me check", tool_calls=[ScriptedToolCall(name="f", arguments="{}")]
            ),
            ScriptedReply(content="ok"),
        ]
    )
    async with ScriptedServer(script) as srv, aclient(srv) as c:
        extra = {"return_token_ids": True}
        first = await c.chat.completions.create(model="m", messages=USER, extra_body=extra)
        msg = first.choices[0].message
        messages = [*USER, msg.model_dump(exclude_none=True), {"role": "tool", "content": "42"}]
        second = await c.chat.completions.create(model="m", messages=messages, extra_body=extra)  # type: ignore[arg-type]
    prompt1 = (first.model_extra or {})["prompt_token_ids"]
    completion1 = (first.choices[0].model_extra or {})["token_ids"]
    prompt2 = (second.model_extra or {})["prompt_token_ids"]
    assert prompt2[: len(prompt1) + len(completion1)] == prompt1 + completion1
    assert "".join(map(chr, completion1)) == 'let me check[{"name": "f", "arguments": "{}"}]'
    assert first.usage is not None and first.usage.completion_tokens == len(completion1)


def test_n_choices(server: ScriptedServer) -> None:
    resp = client(server).chat.completions.create(model="m", messages=USER, n=3)
    assert [c.index for c in resp.choices] == [0, 1, 2]
    assert {c.message.content for c in resp.choices} == {"hello"}
    assert resp.usage is not None and resp.usage.completion_tokens == 15


def test_max_tokens_truncates_with_finish_reason_length(server: ScriptedServer) -> None:
    c = client(server)
    messages = [{"role": "user", "content": "abcdefghij"}]
    for kwargs in ({"max_tokens": 4}, {"max_completion_tokens": 4}):
        resp = c.chat.completions.create(model="m", messages=messages, **kwargs)  # type: ignore[arg-type]
        assert resp.choices[0].message.content == "abcd"
        assert resp.choices[0].finish_reason == "length"
        assert resp.usage is not None and resp.usage.completion_tokens == 4
    resp = c.chat.completions.create(model="m", messages=messages, max_tokens=10)
    assert resp.choices[0].finish_reason == "stop"

    server.set_script(ServerScript(max_tokens_truncates=False))
    resp = c.chat.completions.create(model="m", messages=messages, max_tokens=4)
    assert resp.choices[0].message.content == "abcdefghij"


def test_completions_endpoint(server: ScriptedServer) -> None:
    server.set_script(
        ServerScript(
            replies=[ScriptedReply(match="^Q:", content="A: {last_user}!"), ScriptedReply(content="?")]
        )
    )
    c = client(server)
    resp = c.completions.create(model="m", prompt="Q: 2+2", logprobs=1, extra_body={"return_token_ids": True})
    choice = resp.choices[0]
    assert resp.object == "text_completion"
    assert choice.text == "A: Q: 2+2!"
    assert choice.finish_reason == "stop"
    assert choice.logprobs is not None
    assert choice.logprobs.tokens == list(choice.text)
    assert choice.logprobs.text_offset == list(range(6, 6 + len(choice.text)))
    assert len(choice.logprobs.token_logprobs or []) == len(choice.text)
    assert (choice.model_extra or {})["token_ids"] == [ord(ch) for ch in choice.text]
    assert (resp.model_extra or {})["prompt_token_ids"] == [ord(ch) for ch in "Q: 2+2"]
    assert resp.usage is not None and resp.usage.prompt_tokens == 6

    short = c.completions.create(model="m", prompt="Q: long question", max_tokens=3)
    assert (short.choices[0].text, short.choices[0].finish_reason) == ("A: ", "length")
    assert c.completions.create(model="m", prompt="hi").choices[0].text == "?"


def test_models_health_and_chat_streams(server: ScriptedServer) -> None:
    server.set_script(ServerScript(model="my-model", context_length=100))
    c = client(server, max_retries=0)
    models = c.models.list()
    assert [m.id for m in models.data] == ["my-model"]
    assert (models.data[0].model_extra or {})["max_model_len"] == 100
    root = server.base_url.removesuffix("/v1")
    with urllib.request.urlopen(f"{root}/health") as resp:
        assert resp.status == 200
    streamed = c.chat.completions.create(model="m", messages=USER, stream=True)  # type: ignore[call-overload]
    assert "".join(ch.choices[0].delta.content or "" for ch in streamed if ch.choices)  # test_server_streaming.py


# -- failures ----------------------------------------------------------------------------


def test_context_length_error_uses_vllm_wording() -> None:
    with ScriptedServer(ServerScript(context_length=30)) as srv:
        c = client(srv, max_retries=0)
        assert c.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        long = [{"role": "user", "content": "x" * 50}]
        with pytest.raises(openai.BadRequestError, match="maximum context length") as info:
            c.chat.completions.create(model="m", messages=long)  # type: ignore[arg-type]
        with pytest.raises(openai.BadRequestError, match="maximum context length"):
            c.completions.create(model="m", prompt="y" * 31)
        assert srv.n_errors == 2
    n = len(rendered(long))
    assert info.value.status_code == 400
    assert info.value.body == {
        "message": f"This model's maximum context length is 30 tokens. However, you requested {n} "
        "tokens in the messages, Please reduce the length of the messages.",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }


def test_fail_first_is_retried_by_the_client() -> None:
    with ScriptedServer(ServerScript(fail_first=2)) as srv:
        t0 = time.perf_counter()
        resp = client(srv, max_retries=2).chat.completions.create(model="m", messages=USER)
        assert resp.choices[0].message.content == "hello"
        assert time.perf_counter() - t0 < 1.0  # retry-after-ms beats the client's backoff
        assert srv.stats() == {"n_requests": 3, "n_errors": 2, "n_hangs": 0}
        # set_script re-arms fail_first
        srv.set_script(ServerScript(fail_first=1, fail_first_status=503))
        with pytest.raises(openai.InternalServerError):
            client(srv, max_retries=0).chat.completions.create(model="m", messages=USER)


@pytest.mark.parametrize(
    ("status", "error"), [(500, openai.InternalServerError), (429, openai.RateLimitError)]
)
def test_error_rate_one_always_fails(status: int, error: type[openai.APIStatusError]) -> None:
    with ScriptedServer(ServerScript(error_rate=1.0, error_statuses=[status])) as srv:
        with pytest.raises(error) as info:
            client(srv, max_retries=0).chat.completions.create(model="m", messages=USER)
        assert info.value.status_code == status
        assert info.value.response.headers["retry-after-ms"] == "10"
        assert srv.n_errors == 1


async def test_error_injection_is_seeded() -> None:
    async def outcomes(seed: int) -> list[int]:
        script = ServerScript(error_rate=0.5, error_statuses=[500, 502, 429], seed=seed)
        async with ScriptedServer(script) as srv, aclient(srv, max_retries=0) as c:
            codes = []
            for _ in range(20):
                try:
                    await c.chat.completions.create(model="m", messages=USER)
                    codes.append(200)
                except openai.APIStatusError as e:
                    codes.append(e.status_code)
            return codes

    first = await outcomes(seed=1)
    assert first == await outcomes(seed=1)
    assert first != await outcomes(seed=2)
    assert 200 in first and any(code != 200 for code in first)


async def test_latency_is_honoured_and_overridable() -> None:
    script = ServerScript(
        latency_s=0.2, replies=[ScriptedReply(match="fast", content="quick", latency_s=0.0), ScriptedReply()]
    )
    async with ScriptedServer(script) as srv, aclient(srv) as c:
        t0 = time.perf_counter()
        await asyncio.gather(*(c.chat.completions.create(model="m", messages=USER) for _ in range(5)))
        elapsed = time.perf_counter() - t0
        assert 0.2 <= elapsed < 1.5  # concurrent requests sleep concurrently
        t0 = time.perf_counter()
        await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "fast"}])
        assert time.perf_counter() - t0 < 0.2


async def test_hang_triggers_client_timeout_and_server_still_stops_fast() -> None:
    srv = ScriptedServer(ServerScript(hang_rate=1.0, hang_s=60))
    async with srv, aclient(srv, max_retries=0, timeout=0.3) as c:
        with pytest.raises(openai.APITimeoutError):
            await c.chat.completions.create(model="m", messages=USER)
        assert srv.n_hangs == 1
        srv.set_script(ServerScript())
        ok = await c.chat.completions.create(model="m", messages=USER)
        assert ok.choices[0].message.content == "hello"
        t0 = time.perf_counter()
    assert time.perf_counter() - t0 < 2.0


async def test_stop_cancels_in_flight_hangs_quickly() -> None:
    srv = ScriptedServer(ServerScript(hang_rate=1.0, hang_s=60)).start()
    async with aclient(srv, max_retries=0, timeout=30) as c:
        pending = asyncio.create_task(c.chat.completions.create(model="m", messages=USER))
        while srv.n_hangs == 0:
            await asyncio.sleep(0.01)
        t0 = time.perf_counter()
        await asyncio.to_thread(srv.stop)
        assert time.perf_counter() - t0 < 2.0
        with pytest.raises(openai.APIConnectionError):
            await pending


# -- running -----------------------------------------------------------------------------


def test_port_conflict_raises_and_restart_works(server: ScriptedServer) -> None:
    with pytest.raises(OSError):
        ScriptedServer(port=server.port).start()
    server.stop()
    server.start()
    assert client(server).chat.completions.create(model="m", messages=USER).choices[0].message.content


async def test_async_context_manager_serves_from_its_own_thread() -> None:
    async with ScriptedServer() as srv:
        assert srv._thread is not None and srv._thread is not threading.current_thread()
        c = aclient(srv, http_client=openai.DefaultAioHttpClient())
        async with c:
            replies = await asyncio.gather(
                *(
                    c.chat.completions.create(model="m", messages=[{"role": "user", "content": str(i)}])
                    for i in range(50)
                )
            )
        assert [r.choices[0].message.content for r in replies] == [str(i) for i in range(50)]
        assert srv.n_requests == 50
        assert sorted(r["messages"][0]["content"] for r in srv.requests) == sorted(map(str, range(50)))
    with pytest.raises(RuntimeError):
        _ = srv.base_url


def test_stats_endpoint_and_reset(server: ScriptedServer) -> None:
    client(server).chat.completions.create(model="m", messages=USER)
    root = server.base_url.removesuffix("/v1")
    with urllib.request.urlopen(f"{root}/stats") as resp:
        assert json.loads(resp.read()) == {"n_requests": 1, "n_errors": 0, "n_hangs": 0}
    server.reset()
    assert (server.n_requests, server.requests) == (0, [])


def test_script_round_trips_through_json() -> None:
    script = ServerScript(
        replies=[ScriptedReply(tool_calls=[ScriptedToolCall(name="f", arguments="{bad")], turn=2)],
        context_length=8,
        error_statuses=[503],
    )
    assert ServerScript.model_validate_json(script.model_dump_json()) == script


def test_spawn_runs_in_a_subprocess_and_stops() -> None:
    script = ServerScript(replies=[ScriptedReply(content="from child: {last_user}")], fail_first=1)
    with ScriptedServer.spawn(script) as srv:
        assert srv.pid != os.getpid()
        resp = client(srv, max_retries=1).chat.completions.create(model="m", messages=USER)
        assert resp.choices[0].message.content == "from child: hello"
        assert srv.stats() == {"n_requests": 2, "n_errors": 1, "n_hangs": 0}
    assert srv.proc.poll() is not None


def test_spawned_child_exits_after_max_lifetime() -> None:
    srv = ScriptedServer.spawn(max_lifetime_s=0.3)
    try:
        assert srv.proc.wait(timeout=5) == 0
    finally:
        srv.stop()


def _alive(pid: int) -> bool:
    """Whether pid runs; a zombie (exited, not yet reaped by its new parent) counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def test_spawned_child_exits_when_its_parent_dies() -> None:
    parent_code = textwrap.dedent(
        """
        import sys, time
        from verifiers.testing import ScriptedServer
        srv = ScriptedServer.spawn()
        print(srv.pid, flush=True)
        time.sleep(60)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    parent = subprocess.Popen([sys.executable, "-c", parent_code], stdout=subprocess.PIPE, text=True, env=env)
    assert parent.stdout is not None
    child_pid = int(parent.stdout.readline())
    parent.kill()
    parent.wait()
    parent.stdout.close()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if not _alive(child_pid):
            return
        time.sleep(0.1)
    os.kill(child_pid, 9)
    pytest.fail("the spawned server outlived its parent")
