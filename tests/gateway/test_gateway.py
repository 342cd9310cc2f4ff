"""The interception gateway against a real scripted server, driven by the official openai client."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from typing import Any

import openai
import pytest

import verifiers as vf
from verifiers.gateway import InterceptionGateway, SessionLimits, get_gateway
from verifiers.testing import ScriptedReply, ScriptedServer, ScriptedToolCall, ServerScript
from verifiers.testing.script import render_chat


def _post(url: str, body: dict[str, Any], key: str | None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    hdrs = {"Content-Type": "application/json", **(headers or {})}
    if key is not None:
        hdrs["Authorization"] = f"Bearer {key}"
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=hdrs)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _script(*replies: ScriptedReply, **kw: Any) -> ServerScript:
    return ServerScript(replies=list(replies) or [ScriptedReply(content="hi {last_user}")], **kw)


async def _in_thread(fn: Any) -> Any:
    return await asyncio.to_thread(fn)


MSG = [{"role": "user", "content": "yo"}]


async def test_secret_unknown_and_closed_sessions() -> None:
    with ScriptedServer(_script()) as srv:
        gw = get_gateway()
        s = gw.open_session(vf.make_client(base_url=srv.base_url), "policy")
        url = s.base_url + "/chat/completions"
        body = {"model": "x", "messages": MSG}
        assert (await _in_thread(lambda: _post(url, body, None)))[0] == 401
        status, payload = await _in_thread(lambda: _post(url, body, "vf-wrong"))
        assert status == 401 and "API key" in payload["error"]["message"]
        other = gw.open_session(vf.make_client(base_url=srv.base_url), "policy")
        assert (await _in_thread(lambda: _post(url, body, other.secret)))[0] == 401  # another session's secret
        assert (await _in_thread(lambda: _post(url, body, s.secret)))[0] == 200
        gw.close_session(s)
        status, payload = await _in_thread(lambda: _post(url, body, s.secret))
        assert status == 409 and "closed" in payload["error"]["message"]
        bad = url.replace(s.id, "0" * 16)
        assert (await _in_thread(lambda: _post(bad, body, s.secret)))[0] == 404
        gw.close_session(other)
        assert srv.n_requests == 1


async def test_session_model_and_sampling_win_and_token_fields_are_recorded_not_shown() -> None:
    with ScriptedServer(_script(ScriptedReply(content="ok {last_user}"))) as srv:
        s = get_gateway().open_session(vf.make_client(base_url=srv.base_url), "policy",
                                       {"temperature": 0.3, "max_tokens": 40, "n": 4})

        def program() -> Any:
            c = openai.OpenAI(base_url=s.base_url, api_key=s.secret, max_retries=0)
            tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
            raw = c.chat.completions.with_raw_response.create(
                model="gpt-9", messages=MSG, temperature=1.9, top_p=0.1, max_tokens=5, tools=tools,
                tool_choice="auto", stop=["\n\n"])
            return json.loads(raw.http_response.text), raw.parse()

        payload, parsed = await _in_thread(program)
        sent = srv.requests[-1]
        assert sent["model"] == "policy" and sent["temperature"] == 0.3 and sent["max_tokens"] == 40
        assert "top_p" not in sent and sent.get("n", 1) == 1
        assert sent["tool_choice"] == "auto" and sent["stop"] == ["\n\n"] and sent["tools"][0]["function"]["name"] == "f"
        assert sent["logprobs"] is True and sent["return_token_ids"] is True
        text = json.dumps(payload)
        assert "token_ids" not in text and "prompt_token_ids" not in text
        assert payload["choices"][0]["logprobs"] is None and payload["model"] == "policy"
        assert parsed.choices[0].message.content == "ok yo"
        call = s.calls[0]
        prompt_text = render_chat(sent["messages"])[0]
        assert call.tokens is not None
        assert call.tokens.prompt_ids == [ord(ch) for ch in prompt_text]  # the server's one-id-per-char ids
        assert call.tokens.completion_ids == [ord(ch) for ch in "ok yo"]
        assert call.reply == {"role": "assistant", "content": "ok yo"}


async def test_stream_is_framed_from_the_complete_reply_with_tool_calls() -> None:
    reply = ScriptedReply(content="let me look", tool_calls=[ScriptedToolCall(name="lookup", arguments='{"key": "A"}')])
    with ScriptedServer(_script(reply)) as srv:
        s = get_gateway().open_session(vf.make_client(base_url=srv.base_url), "policy")

        def program() -> Any:
            c = openai.OpenAI(base_url=s.base_url, api_key=s.secret)
            stream = c.chat.completions.create(model="m", messages=MSG, stream=True,
                                               stream_options={"include_usage": True})
            content, calls, finish, usage = "", {}, None, None
            for chunk in stream:
                usage = chunk.usage or usage
                for ch in chunk.choices:
                    content += ch.delta.content or ""
                    for tc in ch.delta.tool_calls or []:
                        calls.setdefault(tc.index, [tc.function.name, ""])[1] += tc.function.arguments or ""
                    finish = ch.finish_reason or finish
            return content, calls, finish, usage

        content, calls, finish, usage = await _in_thread(program)
        assert content == "let me look" and calls == {0: ["lookup", '{"key": "A"}']} and finish == "tool_calls"
        assert usage is not None and usage.completion_tokens > 0
        assert srv.requests[-1].get("stream") in (None, False)  # sampled whole, upstream
        assert s.calls[0].tokens is not None


async def test_sdk_retry_after_a_client_timeout_replays_instead_of_sampling_twice() -> None:
    with ScriptedServer(_script(latency_s=1.5)) as srv:
        s = get_gateway().open_session(vf.make_client(base_url=srv.base_url), "policy")

        def program() -> str | None:
            c = openai.OpenAI(base_url=s.base_url, api_key=s.secret, timeout=0.6, max_retries=4)
            return c.chat.completions.create(model="m", messages=MSG).choices[0].message.content

        assert await _in_thread(program) == "hi yo"
        assert srv.n_requests == 1  # the retries waited on the call in flight
        assert len(s.calls) == 1 and s.calls[0].retries_replayed >= 1


async def test_identical_unmarked_body_is_a_new_turn_and_marked_retry_replays() -> None:
    with ScriptedServer(_script()) as srv:
        s = get_gateway().open_session(vf.make_client(base_url=srv.base_url), "policy")
        url, body = s.base_url + "/chat/completions", {"model": "m", "messages": MSG}
        first = await _in_thread(lambda: _post(url, body, s.secret))
        again = await _in_thread(lambda: _post(url, body, s.secret))
        retry = await _in_thread(lambda: _post(url, body, s.secret, {"x-stainless-retry-count": "1"}))
        assert first[0] == again[0] == retry[0] == 200
        assert retry[1] == again[1]  # the very same answer
        assert srv.n_requests == 2 and len(s.calls) == 2 and s.calls[1].retries_replayed == 1


async def test_upstream_5xx_is_relayed_and_the_programs_own_retry_gets_a_fresh_sample() -> None:
    with ScriptedServer(_script(fail_first=1, fail_first_status=503)) as srv:
        s = get_gateway().open_session(vf.make_client(base_url=srv.base_url, max_retries=0), "policy")

        def program() -> str | None:
            c = openai.OpenAI(base_url=s.base_url, api_key=s.secret, max_retries=2)
            return c.chat.completions.create(model="m", messages=MSG).choices[0].message.content

        assert await _in_thread(program) == "hi yo"
        assert [c.status for c in s.calls] == [503, 200]
        assert s.turn_tokens() and len(s.turn_tokens()) == 1


async def test_overlong_prompt_answers_400_context_length_and_marks_truncated() -> None:
    with ScriptedServer(_script(context_length=20)) as srv:
        s = get_gateway().open_session(vf.make_client(base_url=srv.base_url, max_retries=0), "policy")

        def program() -> Exception:
            c = openai.OpenAI(base_url=s.base_url, api_key=s.secret, max_retries=2)
            try:
                c.chat.completions.create(model="m", messages=[{"role": "user", "content": "x" * 100}])
            except openai.BadRequestError as exc:
                return exc
            raise AssertionError("no error")

        exc = await _in_thread(program)
        assert "maximum context length" in str(exc)
        assert s.truncated and s.stop_reason == "prompt_too_long" and srv.n_requests == 1  # 4xx: not retried


async def test_call_and_token_budgets_end_the_rollout_with_a_clear_400() -> None:
    with ScriptedServer(_script(ScriptedReply(content="abcdefghij"))) as srv:
        client = vf.make_client(base_url=srv.base_url)
        s = get_gateway().open_session(client, "policy", limits=SessionLimits(max_calls=2))
        url, body = s.base_url + "/chat/completions", {"model": "m", "messages": MSG}
        assert [(await _in_thread(lambda: _post(url, body, s.secret)))[0] for _ in range(2)] == [200, 200]
        status, payload = await _in_thread(lambda: _post(url, body, s.secret))
        assert status == 400 and payload["error"]["message"] == (
            "rollout stopped: the call budget of 2 model calls is used up")
        assert s.stop_reason == "max_turns" and srv.n_requests == 2
        t = get_gateway().open_session(client, "policy", {"max_tokens": 100}, SessionLimits(max_tokens=15))
        url = t.base_url + "/chat/completions"
        assert (await _in_thread(lambda: _post(url, body, t.secret)))[0] == 200
        assert srv.requests[-1]["max_tokens"] == 15  # capped to what is left
        assert (await _in_thread(lambda: _post(url, body, t.secret)))[0] == 200
        assert srv.requests[-1]["max_tokens"] == 5
        status, payload = await _in_thread(lambda: _post(url, body, t.secret))
        assert status == 400 and "token budget of 15" in payload["error"]["message"] and t.stop_reason == "length"


async def test_concurrent_calls_of_one_session_are_all_recorded_in_arrival_order() -> None:
    with ScriptedServer(_script(ScriptedReply(content="r {last_user}"), latency_s=0.3)) as srv:
        s = get_gateway().open_session(vf.make_client(base_url=srv.base_url), "policy")
        url = s.base_url + "/chat/completions"
        results: dict[int, Any] = {}

        def sub_agent(i: int) -> None:
            results[i] = _post(url, {"model": "m", "messages": [{"role": "user", "content": f"a{i}"}]}, s.secret)

        def program() -> None:
            threads = [threading.Thread(target=sub_agent, args=(i,)) for i in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()

        await _in_thread(program)
        assert all(status == 200 for status, _ in results.values()) and srv.n_requests == 4
        assert [c.seq for c in s.calls] == [0, 1, 2, 3]
        assert sorted(c.reply["content"] for c in s.calls if c.reply) == ["r a0", "r a1", "r a2", "r a3"]
        for c in s.calls:  # each call's reply belongs to its own request
            assert c.reply and c.reply["content"] == "r " + c.messages[-1]["content"]


async def test_models_lists_the_session_model_only_and_other_routes_say_what_is_served() -> None:
    with ScriptedServer(_script()) as srv:
        s = get_gateway().open_session(vf.make_client(base_url=srv.base_url), "policy")

        def program() -> Any:
            c = openai.OpenAI(base_url=s.base_url, api_key=s.secret, max_retries=0)
            names = [m.id for m in c.models.list()]
            try:
                c.completions.create(model="policy", prompt="hi")
            except openai.NotFoundError as exc:
                return names, str(exc)
            raise AssertionError("legacy completions answered")

        names, err = await _in_thread(program)
        assert names == ["policy"] and "legacy text completions is not supported" in err
        assert "POST /chat/completions, POST /responses" in err and "POST /messages" in err
        assert srv.n_requests == 0


@pytest.mark.parametrize("bad", ["not json", "[1, 2]"])
async def test_bad_bodies_get_a_400_naming_the_problem(bad: str) -> None:
    with ScriptedServer(_script()) as srv:
        s = get_gateway().open_session(vf.make_client(base_url=srv.base_url), "policy")
        req = urllib.request.Request(s.base_url + "/chat/completions", data=bad.encode(),
                                     headers={"Authorization": f"Bearer {s.secret}"})

        def send() -> tuple[int, Any]:
            try:
                urllib.request.urlopen(req, timeout=10)
            except urllib.error.HTTPError as exc:
                return exc.code, json.loads(exc.read())
            return 200, None

        status, payload = await _in_thread(send)
        assert status == 400 and ("JSON" in payload["error"]["message"])


async def test_a_hosted_api_that_rejects_token_fields_is_asked_again_without_them() -> None:
    """OpenAI's API answers 400 "Unrecognized request argument supplied: return_token_ids" (a
    stand-in for it here: a hosted API cannot be run on this machine). The program still gets its
    answer; nothing is recorded to train on."""
    from aiohttp import web

    seen: list[dict[str, Any]] = []

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append(body)
        if "return_token_ids" in body:
            return web.json_response({"error": {"message": "Unrecognized request argument supplied: "
                                                "return_token_ids", "type": "invalid_request_error"}}, status=400)
        return web.json_response({"id": "c1", "object": "chat.completion", "created": 0, "model": body["model"],
                                  "choices": [{"index": 0, "finish_reason": "stop",
                                               "message": {"role": "assistant", "content": "hosted"}}]})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        s = get_gateway().open_session(vf.make_client(base_url=f"http://127.0.0.1:{port}/v1", max_retries=0), "gpt")

        def program() -> str | None:
            c = openai.OpenAI(base_url=s.base_url, api_key=s.secret, max_retries=0)
            return c.chat.completions.create(model="m", messages=MSG).choices[0].message.content

        assert await _in_thread(program) == "hosted"
        assert len(seen) == 2 and "return_token_ids" not in seen[1] and "logprobs" not in seen[1]
        assert s.calls[0].tokens is None and not s.want_tokens
    finally:
        await runner.cleanup()


async def test_closing_a_session_cancels_its_upstream_call_in_flight() -> None:
    """A rollout that ends while its program waits on the model (the program timed out or was
    killed) closes its session: the upstream request is cancelled, so the inference server can
    stop generating an answer nobody will read, and the call is recorded as failed, not lost."""
    from aiohttp import web

    reached, cancelled = asyncio.Event(), threading.Event()

    async def chat(request: web.Request) -> web.Response:
        reached.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()  # the server saw its client go: it would stop generating here
            raise
        return web.json_response({})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    client = vf.make_client(base_url=f"http://127.0.0.1:{port}/v1", max_retries=0)
    try:
        s = get_gateway().open_session(client, "policy")
        program = asyncio.ensure_future(_in_thread(lambda: _post(f"{s.base_url}/chat/completions",
                                                                 {"model": "m", "messages": MSG}, s.secret)))
        await asyncio.wait_for(reached.wait(), 10)
        get_gateway().close_session(s)
        status, body = await asyncio.wait_for(program, 10)
        assert await asyncio.to_thread(cancelled.wait, 10), "the upstream request was still running"
        assert status == 502 and "rollout owning this session has ended" in body["error"]["message"]
        assert s.calls[0].status == 502 and s.calls[0].reply is None
    finally:
        await client.close()
        await runner.cleanup()


def test_the_filesystem_socket_directory_goes_with_the_process() -> None:
    """The process-wide gateway is seldom stopped by hand; its socket directory must not pile up in /tmp."""
    code = (
        "from verifiers.gateway import get_gateway\n"
        "import os\n"
        "gw = get_gateway().start()\n"
        "print(os.path.dirname(gw.unix_path), os.path.exists(gw.unix_path), flush=True)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    unix_dir, existed = out.stdout.split()
    assert existed == "True"
    assert not os.path.exists(unix_dir), f"{unix_dir} outlived the process"


def test_stop_removes_the_socket_directory_and_start_listens_afresh() -> None:
    gw = InterceptionGateway().start()
    first = os.path.dirname(gw.unix_path)
    gw.stop()
    assert not os.path.exists(first)
    gw.start()
    try:
        assert os.path.exists(gw.unix_path)
        assert os.path.dirname(gw.unix_path) != first
    finally:
        gw.stop()
