"""The Responses API and Anthropic Messages at the gateway, against a real scripted server.

Driven by the official clients (``openai``'s ``client.responses``, ``anthropic``'s
``client.messages``), whose models parse every answer and whose stream helpers check the event
order. Each request is checked call by call: the chat request the `ScriptedServer` received is
what the translation should send, and the recorded token ids are the server's (one id per
character of what it rendered and sampled), so a rollout trains the same in any dialect.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from typing import Any

import openai
import pytest

import verifiers as vf
from verifiers.gateway import get_gateway
from verifiers.gateway.token_in import canonical, find_extended
from verifiers.testing import ScriptedReply, ScriptedServer, ScriptedToolCall, ServerScript
from verifiers.testing.script import render_chat

LOOKUP = {"type": "function", "name": "lookup", "description": "read a value",
          "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}}
CHAT_LOOKUP = {"type": "function", "function": {k: v for k, v in LOOKUP.items() if k != "type"}}
ANTHROPIC_LOOKUP = {"name": "lookup", "description": "read a value", "input_schema": LOOKUP["parameters"]}
CALL_THEN_ANSWER = ServerScript(replies=[
    ScriptedReply(turn=0, content="let me look", tool_calls=[ScriptedToolCall(name="lookup", arguments='{"key": "A"}')]),
    ScriptedReply(content="A is {last_message}"),
])


def _post(url: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _events(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) of a server-sent event stream."""
    out = []
    for block in raw.decode().strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines())
        out.append((fields["event"], json.loads(fields["data"])))
    return out


def _check_ids(session: Any, sent: list[dict[str, Any]]) -> None:
    """Every recorded call carries the ids the scripted server gave for what it was sent."""
    assert len(session.calls) == len(sent)
    for call, request in zip(session.calls, sent, strict=True):
        assert call.messages == request["messages"]
        assert call.tokens.prompt_ids == [ord(c) for c in render_chat(request["messages"])[0]]
        text = (call.reply.get("content") or "") + (json.dumps([{"name": t["function"]["name"],
                                                                 "arguments": t["function"]["arguments"]}
                                                                for t in call.reply.get("tool_calls") or []])
                                                    if call.reply.get("tool_calls") else "")
        assert call.tokens.completion_ids == [ord(c) for c in text]


def _plain(obj: Any, drop: frozenset[str] = frozenset({"id", "created_at", "completed_at", "parsed",
                                                          "parsed_arguments"})) -> Any:
    """An SDK object as JSON data without ids, times and the stream helper's parsed fields."""
    if hasattr(obj, "model_dump"):
        obj = obj.model_dump(mode="json")
    if isinstance(obj, dict):
        return {k: _plain(v, drop) for k, v in obj.items() if k not in drop}
    if isinstance(obj, list):
        return [_plain(v, drop) for v in obj]
    return obj


def _extends_first(session: Any) -> bool:
    """Token-in would continue call 0 from its ids: call 1's messages are its messages + reply + a tail."""
    first, second = session.calls[0], session.calls[1]
    found = find_extended([first], second.messages, second.tools, lambda c: [canonical(m) for m in c.messages])
    return not isinstance(found, str) and found[0] is first


# -- the Responses API ---------------------------------------------------------------------
async def test_responses_call_by_call_with_tools_and_the_items_sent_back() -> None:
    with ScriptedServer(CALL_THEN_ANSWER) as srv:
        s = get_gateway().open_session(vf.make_client(base_url=srv.base_url), "policy", {"temperature": 0.3})

        def program() -> tuple[Any, Any]:
            c = openai.OpenAI(base_url=s.base_url, api_key=s.secret, max_retries=0)
            first = c.responses.create(model="gpt-5", instructions="Be brief.", input="look up A", tools=[LOOKUP],
                                       tool_choice="auto", temperature=1.9, max_output_tokens=9, store=False)
            # What an SDK without previous_response_id does: send the output items back, then the result.
            items = [{"role": "user", "content": "look up A"}, *[i.model_dump(exclude_none=True) for i in first.output],
                     {"type": "function_call_output", "call_id": first.output[-1].call_id, "output": "42"}]
            second = c.responses.create(model="gpt-5", instructions="Be brief.", input=items, tools=[LOOKUP])
            return first, second

        first, second = await asyncio.to_thread(program)
        get_gateway().close_session(s)
    sent = srv.requests
    assert [r["messages"] for r in sent] == [
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "look up A"}],
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "look up A"},
         {"role": "assistant", "content": "let me look", "tool_calls": [
             {"id": "call_0", "type": "function", "function": {"name": "lookup", "arguments": '{"key": "A"}'}}]},
         {"role": "tool", "tool_call_id": "call_0", "content": "42"}],
    ]
    for r in sent:  # function tools in the chat shape; the session's model and sampling win
        assert r["tools"] == [CHAT_LOOKUP] and r["model"] == "policy" and r["temperature"] == 0.3
        assert "max_tokens" not in r and r["return_token_ids"] is True
    assert sent[0]["tool_choice"] == "auto"

    assert first.status == "completed" and first.model == "policy" and first.id.startswith("resp_")
    message, call = first.output
    assert message.type == "message" and message.content[0].text == "let me look"
    assert (call.type, call.call_id, call.name, call.arguments) == ("function_call", "call_0", "lookup", '{"key": "A"}')
    assert first.usage.output_tokens == len(s.calls[0].tokens.completion_ids)
    assert second.output_text == "A is 42" and second.output[0].status == "completed"
    _check_ids(s, sent)
    assert s.calls[1].reply == {"role": "assistant", "content": "A is 42"}
    assert _extends_first(s)  # the items sent back are the reply they came from: token-in applies


async def test_previous_response_id_continues_the_stored_conversation() -> None:
    with ScriptedServer(CALL_THEN_ANSWER) as srv:
        s = get_gateway().open_session(vf.make_client(base_url=srv.base_url), "policy")

        def program() -> dict[str, Any]:
            c = openai.OpenAI(base_url=s.base_url, api_key=s.secret, max_retries=0)
            first = c.responses.create(model="m", instructions="Be brief.", input="look up A", tools=[LOOKUP])
            second = c.responses.create(model="m", instructions="Now answer.", previous_response_id=first.id,
                                        tools=[LOOKUP], input=[{"type": "function_call_output",
                                                                "call_id": first.output[-1].call_id, "output": "42"}])
            out: dict[str, Any] = {"first": first, "second": second, "got": c.responses.retrieve(first.id)}
            with pytest.raises(openai.BadRequestError) as unknown:
                c.responses.create(model="m", previous_response_id="resp_nope", input="hi")
            out["unknown"] = unknown.value
            unstored = c.responses.create(model="m", input="look up A", store=False)
            with pytest.raises(openai.BadRequestError):
                c.responses.create(model="m", previous_response_id=unstored.id, input="and?")
            with pytest.raises(openai.NotFoundError):
                c.responses.retrieve(unstored.id)
            out["deleted"] = c.responses.delete(second.id)
            with pytest.raises(openai.NotFoundError):
                c.responses.retrieve(second.id)
            return out

        out = await asyncio.to_thread(program)
        get_gateway().close_session(s)
    # As the API does: the earlier input and output, not the earlier instructions, then the new input.
    assert srv.requests[1]["messages"] == [
        {"role": "system", "content": "Now answer."}, {"role": "user", "content": "look up A"},
        {"role": "assistant", "content": "let me look", "tool_calls": [
            {"id": "call_0", "type": "function", "function": {"name": "lookup", "arguments": '{"key": "A"}'}}]},
        {"role": "tool", "tool_call_id": "call_0", "content": "42"}]
    assert out["second"].output_text == "A is 42" and out["second"].previous_response_id == out["first"].id
    assert out["got"].id == out["first"].id and out["got"].output[1].call_id == "call_0"
    unknown = out["unknown"]
    assert unknown.status_code == 400 and unknown.code == "previous_response_not_found"
    assert unknown.param == "previous_response_id" and "resp_nope" in unknown.message
    assert out["deleted"] is None or getattr(out["deleted"], "deleted", True)
    assert srv.n_requests == 3  # the refused requests never reached the model
    # Call 1 (instructions aside) continues call 0's messages and reply.
    assert [canonical(m) for m in s.calls[1].messages[1:3]] == [canonical(m) for m in (*s.calls[0].messages[1:],
                                                                                         s.calls[0].reply)]


async def test_previous_response_id_follow_up_extends_the_earlier_call() -> None:
    with ScriptedServer(CALL_THEN_ANSWER) as srv:
        s = get_gateway().open_session(vf.make_client(base_url=srv.base_url), "policy")

        def program() -> None:
            c = openai.OpenAI(base_url=s.base_url, api_key=s.secret, max_retries=0)
            first = c.responses.create(model="m", input="look up A", tools=[LOOKUP])
            c.responses.create(model="m", previous_response_id=first.id, tools=[LOOKUP],
                               input=[{"type": "function_call_output", "call_id": "call_0", "output": "42"}])

        await asyncio.to_thread(program)
        get_gateway().close_session(s)
    _check_ids(s, srv.requests)
    assert _extends_first(s)


async def test_responses_item_references_roles_and_options_translate() -> None:
    with ScriptedServer(CALL_THEN_ANSWER) as srv:
        s = get_gateway().open_session(vf.make_client(base_url=srv.base_url), "policy")
        schema = {"type": "object", "properties": {"value": {"type": "string"}}}

        def program() -> str:
            c = openai.OpenAI(base_url=s.base_url, api_key=s.secret, max_retries=0)
            first = c.responses.create(model="m", input=[
                {"role": "developer", "content": "Be brief."},
                {"role": "user", "content": [{"type": "input_text", "text": "look up"},
                                             {"type": "input_text", "text": " A"}]}], tools=[LOOKUP])
            c.responses.create(model="m", tools=[LOOKUP], tool_choice={"type": "function", "name": "lookup"},
                               parallel_tool_calls=False,
                               text={"format": {"type": "json_schema", "name": "answer", "schema": schema}},
                               input=[{"type": "item_reference", "id": item.id} for item in first.output] + [
                                   {"type": "function_call_output", "call_id": "call_0", "output": [
                                       {"type": "input_text", "text": "4"}, {"type": "input_text", "text": "2"}]}])
            with pytest.raises(openai.BadRequestError) as exc:
                c.responses.create(model="m", input=[{"type": "item_reference", "id": "msg_nope"}])
            return exc.value.message

        missing = await asyncio.to_thread(program)
        get_gateway().close_session(s)
    first, second = srv.requests
    assert first["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [
        {"type": "text", "text": "look up"}, {"type": "text", "text": " A"}]}]  # the program's parts, kept
    assert second["messages"] == [
        {"role": "assistant", "content": "let me look", "tool_calls": [
            {"id": "call_0", "type": "function", "function": {"name": "lookup", "arguments": '{"key": "A"}'}}]},
        {"role": "tool", "tool_call_id": "call_0", "content": "42"}]
    assert second["tool_choice"] == {"type": "function", "function": {"name": "lookup"}}
    assert second["parallel_tool_calls"] is False
    assert second["response_format"] == {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}
    assert "msg_nope" in missing and srv.n_requests == 2


class WithReasoning:
    """The environment's client, its replies given the reasoning text that a server with a reasoning
    parser returns next to the content (vLLM's ``reasoning_content``)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def chat(self, model: str, messages: Any, **kw: Any) -> Any:
        out = await self.inner.chat(model, messages, **kw)
        out.raw["choices"][0]["message"]["reasoning_content"] = f"think {len(messages)}"
        return out

    async def complete(self, model: str, prompt: Any, **kw: Any) -> Any:
        return await self.inner.complete(model, prompt, **kw)


async def test_reasoning_is_passed_through_both_dialects_and_back(anthropic: Any) -> None:
    from verifiers.clients.openai_client import as_chat_client

    with ScriptedServer(CALL_THEN_ANSWER) as srv:
        s = get_gateway().open_session(WithReasoning(as_chat_client(vf.make_client(base_url=srv.base_url))), "policy")

        def program() -> tuple[Any, list[str], Any]:
            c = openai.OpenAI(base_url=s.base_url, api_key=s.secret, max_retries=0)
            with c.responses.stream(model="m", input="look up A", tools=[LOOKUP]) as stream:
                kinds = [event.type for event in stream]
                first = stream.get_final_response()
            c.responses.create(model="m", tools=[LOOKUP], input=[
                {"role": "user", "content": "look up A"}, *[i.model_dump(exclude_none=True) for i in first.output],
                {"type": "function_call_output", "call_id": first.output[-1].call_id, "output": "42"}])
            a = _client(anthropic, s)
            kw: dict[str, Any] = {"model": "claude", "max_tokens": 100, "tools": [ANTHROPIC_LOOKUP]}
            msgs: list[dict[str, Any]] = [{"role": "user", "content": "look up A"}]
            reply = a.messages.create(**kw, messages=msgs)
            a.messages.create(**kw, messages=[*msgs, {"role": "assistant", "content": reply.content}, {
                "role": "user", "content": [{"type": "tool_result", "tool_use_id": reply.content[-1].id, "content": "42"}]}])
            return first, kinds, reply

        first, kinds, reply = await asyncio.to_thread(program)
        get_gateway().close_session(s)
    thought, message, call = first.output
    assert thought.type == "reasoning" and [p.text for p in thought.content] == ["think 1"]
    assert kinds[2:7] == ["response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
                          "response.reasoning_text.done", "response.content_part.done"]
    assert (message.type, call.type) == ("message", "function_call")
    assert [b.type for b in reply.content] == ["thinking", "text", "tool_use"] and reply.content[0].thinking == "think 1"
    # Sent back, the reasoning is the assistant message's again, next to its text and tool call.
    for sent in (srv.requests[1], srv.requests[3]):
        assistant = sent["messages"][1]
        assert assistant["reasoning_content"] == "think 1" and assistant["content"] == "let me look"
        assert assistant["tool_calls"][0]["function"]["name"] == "lookup"
    assert _extends_first(s)


async def test_responses_stream_is_the_event_sequence_of_the_reply() -> None:
    with ScriptedServer(CALL_THEN_ANSWER) as srv:
        s = get_gateway().open_session(vf.make_client(base_url=srv.base_url), "policy")

        def program() -> tuple[list[str], Any, Any, tuple[int, bytes]]:
            c = openai.OpenAI(base_url=s.base_url, api_key=s.secret, max_retries=0)
            with c.responses.stream(model="m", input="look up A", tools=[LOOKUP]) as stream:
                kinds = [event.type for event in stream]
                final = stream.get_final_response()
            plain = c.responses.create(model="m", input="look up A", tools=[LOOKUP])
            raw = _post(s.base_url + "/responses", {"model": "m", "input": "look up A", "stream": True, "tools": [LOOKUP]},
                        {"Authorization": f"Bearer {s.secret}"})
            return kinds, final, plain, raw

        kinds, final, plain, (status, raw) = await asyncio.to_thread(program)
        get_gateway().close_session(s)
    assert kinds == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.content_part.added", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    # The stream builds the very response a plain call gets (the server numbers its tool calls).
    drop = frozenset({"id", "call_id", "created_at", "completed_at", "parsed", "parsed_arguments"})
    assert _plain(final, drop) == _plain(plain, drop)
    assert status == 200
    events = _events(raw)
    assert [e["sequence_number"] for _, e in events] == list(range(len(events)))
    assert all(name == data["type"] for name, data in events)
    assert events[0][1]["response"]["status"] == "in_progress" and events[0][1]["response"]["output"] == []
    delta = next(d for n, d in events if n == "response.function_call_arguments.delta")
    assert delta["delta"] == '{"key": "A"}' and delta["output_index"] == 1
    assert all(r.get("stream") in (None, False) for r in srv.requests)  # sampled whole upstream, then framed
    _check_ids(s, srv.requests)


async def test_responses_refuses_what_it_cannot_serve_before_sampling() -> None:
    with ScriptedServer(ServerScript(replies=[ScriptedReply(content="x" * 5, finish_reason="length")])) as srv:
        s = get_gateway().open_session(vf.make_client(base_url=srv.base_url), "policy")

        def program() -> tuple[list[str], Any]:
            c = openai.OpenAI(base_url=s.base_url, api_key=s.secret, max_retries=0)
            errors = []
            for kw in ({"tools": [{"type": "web_search"}]}, {"input": [{"type": "computer_call_output", "call_id": "c"}]},
                       {"conversation": "conv_1"}, {"input": [{"role": "user", "content": [
                           {"type": "input_file", "file_id": "file-1"}]}]}):
                with pytest.raises(openai.BadRequestError) as exc:
                    c.responses.create(model="m", **{"input": "hi", **kw})
                errors.append(exc.value.message)
            return errors, c.responses.create(model="m", input="hi")

        errors, cut = await asyncio.to_thread(program)
        get_gateway().close_session(s)
    assert "'web_search' is a built-in tool the gateway cannot run" in errors[0] and "function tools" in errors[0]
    assert "'computer_call_output' is not supported" in errors[1]
    assert "Conversations API" in errors[2] and "'input_file' is not supported" in errors[3]
    assert srv.n_requests == 1
    assert cut.status == "incomplete" and cut.incomplete_details.reason == "max_output_tokens"
    assert cut.output[0].status == "incomplete" and cut.output_text == "xxxxx"


async def test_a_marked_retry_of_a_responses_call_gets_the_same_response() -> None:
    with ScriptedServer(CALL_THEN_ANSWER) as srv:
        s = get_gateway().open_session(vf.make_client(base_url=srv.base_url), "policy")
        url, body = s.base_url + "/responses", {"model": "m", "input": "look up A"}
        auth = {"Authorization": f"Bearer {s.secret}"}
        first = await asyncio.to_thread(_post, url, body, auth)
        retry = await asyncio.to_thread(_post, url, body, {**auth, "x-stainless-retry-count": "1"})
        get_gateway().close_session(s)
    assert first[0] == retry[0] == 200 and json.loads(first[1]) == json.loads(retry[1])  # the same id too
    assert srv.n_requests == 1 and len(s.calls) == 1 and s.calls[0].retries_replayed == 1
    assert list(s.responses) == [json.loads(first[1])["id"]]


# -- Anthropic Messages --------------------------------------------------------------------
@pytest.fixture
def anthropic() -> Any:
    """The official SDK (a dependency of vLLM's CPU build, which CI installs)."""
    return pytest.importorskip("anthropic")


def _client(anthropic: Any, s: Any) -> Any:
    env = s.env_vars()  # what AgentEnv gives the program
    return anthropic.Anthropic(base_url=env["ANTHROPIC_BASE_URL"], api_key=env["ANTHROPIC_API_KEY"], max_retries=0)


async def test_messages_call_by_call_with_tools_and_tool_results(anthropic: Any) -> None:
    with ScriptedServer(CALL_THEN_ANSWER) as srv:
        s = get_gateway().open_session(vf.make_client(base_url=srv.base_url), "policy", {"max_tokens": 64})

        def program() -> tuple[Any, Any, Any]:
            c = _client(anthropic, s)
            messages: list[dict[str, Any]] = [{"role": "user", "content": "look up A"}]
            first = c.messages.create(model="claude-sonnet-5-5", max_tokens=1024, system="Be brief.",
                                      tools=[ANTHROPIC_LOOKUP], tool_choice={"type": "any"}, messages=messages,
                                      stop_sequences=["\n\nHuman:"])
            use = next(b for b in first.content if b.type == "tool_use")
            messages += [{"role": "assistant", "content": first.content},
                         {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "42"},
                                                      {"type": "text", "text": "go on"}]}]
            second = c.messages.create(model="claude-sonnet-5-5", max_tokens=1024, system=[
                {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
                tools=[ANTHROPIC_LOOKUP], messages=messages)
            return first, second, c.models.list()

        first, second, models = await asyncio.to_thread(program)
        get_gateway().close_session(s)
    sent = srv.requests
    call = {"id": "call_0", "type": "function", "function": {"name": "lookup", "arguments": '{"key": "A"}'}}
    assert sent[0]["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "look up A"}]
    assert sent[1]["messages"] == [*sent[0]["messages"], {"role": "assistant", "content": "let me look", "tool_calls": [call]},
                                   {"role": "tool", "tool_call_id": "call_0", "content": "42"},
                                   {"role": "user", "content": "go on"}]
    assert sent[0]["tool_choice"] == "required" and sent[0]["stop"] == ["\n\nHuman:"]
    for r in sent:
        assert r["tools"] == [{"type": "function", "function": {"name": "lookup", "parameters": LOOKUP["parameters"],
                                                                 "description": "read a value"}}]
        assert r["model"] == "policy" and r["max_tokens"] == 64 and "temperature" not in r
    assert first.stop_reason == "tool_use" and first.model == "policy"
    assert [b.type for b in first.content] == ["text", "tool_use"] and first.content[0].text == "let me look"
    assert (first.content[1].id, first.content[1].name, first.content[1].input) == ("call_0", "lookup", {"key": "A"})
    assert second.stop_reason == "end_turn" and second.content[0].text == "A is go on"
    assert first.usage.input_tokens == len(s.calls[0].tokens.prompt_ids)
    assert first.usage.output_tokens == len(s.calls[0].tokens.completion_ids)
    assert [m.id for m in models.data] == ["policy"]
    _check_ids(s, sent)
    assert _extends_first(s)


async def test_messages_stream_is_the_event_sequence_of_the_reply(anthropic: Any) -> None:
    with ScriptedServer(CALL_THEN_ANSWER) as srv:
        s = get_gateway().open_session(vf.make_client(base_url=srv.base_url), "policy")

        def program() -> tuple[list[str], Any, Any, tuple[int, bytes]]:
            c = _client(anthropic, s)
            kw: dict[str, Any] = {"model": "claude", "max_tokens": 100, "tools": [ANTHROPIC_LOOKUP],
                                  "messages": [{"role": "user", "content": "look up A"}]}
            with c.messages.stream(**kw) as stream:
                kinds = [event.type for event in stream]
                final = stream.get_final_message()
            plain = c.messages.create(**kw)
            raw = _post(s.base_url.removesuffix("/v1") + "/v1/messages", {**kw, "stream": True}, {"x-api-key": s.secret})
            return kinds, final, plain, raw

        kinds, final, plain, (status, raw) = await asyncio.to_thread(program)
        get_gateway().close_session(s)
    # The SDK's helper adds its own "text" and "input_json" events after the raw deltas.
    assert kinds == ["message_start", "content_block_start", "content_block_delta", "text", "content_block_stop",
                     "content_block_start", "content_block_delta", "input_json", "content_block_stop",
                     "message_delta", "message_stop"]
    assert _plain(final) == _plain(plain)
    assert status == 200
    assert [name for name, _ in _events(raw)] == [
        "message_start", "content_block_start", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"]
    events = dict(enumerate(_events(raw)))
    assert events[5][1]["delta"] == {"type": "input_json_delta", "partial_json": '{"key": "A"}'}
    assert events[7][1]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    _check_ids(s, srv.requests)


async def test_messages_errors_have_the_anthropic_shape(anthropic: Any) -> None:
    with ScriptedServer(ServerScript(fail_first=1, fail_first_status=503)) as srv:
        s = get_gateway().open_session(vf.make_client(base_url=srv.base_url, max_retries=0), "policy")

        def program() -> list[Any]:
            out = []
            kw: dict[str, Any] = {"model": "claude", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
            for client, extra, error in (
                (_client(anthropic, s), {}, anthropic.InternalServerError),  # the upstream 503, relayed
                (_client(anthropic, s), {"tools": [{"type": "web_search_20250305", "name": "web_search"}]},
                 anthropic.BadRequestError),
                (anthropic.Anthropic(base_url=s.base_url.removesuffix("/v1"), api_key="vf-wrong", max_retries=0), {},
                 anthropic.AuthenticationError),
            ):
                with pytest.raises(error) as exc:
                    client.messages.create(**kw, **extra)
                out.append(exc.value)
            out.append(_client(anthropic, s).messages.create(**kw))
            return out

        upstream, server_tool, auth, ok = await asyncio.to_thread(program)
        status, body = await asyncio.to_thread(_post, s.base_url + "/messages/count_tokens", {}, {"x-api-key": s.secret})
        get_gateway().close_session(s)
    for exc in (upstream, server_tool, auth):
        assert exc.body["type"] == "error" and set(exc.body["error"]) == {"type", "message"}
    assert upstream.status_code == 503 and upstream.body["error"]["type"] == "api_error"
    assert "server tool the gateway cannot run" in server_tool.body["error"]["message"]
    assert auth.body["error"]["type"] == "authentication_error"
    assert ok.content[0].text == "hi"
    assert status == 404 and json.loads(body)["error"]["type"] == "not_found_error"
    assert srv.n_requests == 2  # the refused requests never reached the model
