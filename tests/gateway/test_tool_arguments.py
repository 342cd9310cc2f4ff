"""Tool-call arguments are never invented: what is not a JSON object is passed on as it is, or refused,
the way each API does, and the recorded tokens are the sampled ones either way."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from typing import Any

import verifiers as vf
from verifiers.gateway import get_gateway
from verifiers.testing import ScriptedReply, ScriptedServer, ScriptedToolCall, ServerScript


def _post(url: str, body: dict[str, Any], secret: str) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={
        "Content-Type": "application/json", "x-api-key": secret, "Authorization": f"Bearer {secret}"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


async def _ask(reply: ScriptedReply, route: str, body: dict[str, Any]) -> tuple[int, dict[str, Any], Any]:
    with ScriptedServer(ServerScript(replies=[reply])) as srv:
        client = vf.make_client(base_url=srv.base_url)
        session = get_gateway().open_session(client, "policy")
        status, answer = await asyncio.to_thread(_post, f"{session.base_url}/{route}", body, session.secret)
        get_gateway().close_session(session)
        await client.close()
    return status, answer, session


MESSAGES = {"model": "m", "max_tokens": 32, "messages": [{"role": "user", "content": "look up A"}],
            "tools": [{"name": "lookup", "input_schema": {"type": "object", "properties": {"key": {"type": "string"}}}}]}


async def test_a_call_whose_arguments_are_not_an_object_reaches_a_messages_program_as_text() -> None:
    status, message, session = await _ask(
        ScriptedReply(content=None, tool_calls=[ScriptedToolCall(name="lookup", arguments="[1, 2]")]),
        "messages", MESSAGES)
    assert status == 200 and [b["type"] for b in message["content"]] == ["text"]
    assert message["content"][0]["text"] == '<tool_call>\n{"name": "lookup", "arguments": [1, 2]}\n</tool_call>'
    assert message["stop_reason"] == "end_turn"  # no tool_use was delivered, so the turn ended
    call = session.calls[0]
    assert call.reply["tool_calls"][0]["function"]["arguments"] == "[1, 2]"  # recorded as the model wrote it
    assert call.tokens is not None and call.tokens.completion_ids  # the sampled ids, untouched


async def test_a_call_cut_at_max_tokens_is_not_completed_with_an_empty_input() -> None:
    status, message, _ = await _ask(
        ScriptedReply(content=None, tool_calls=[ScriptedToolCall(name="lookup", arguments='{"key": "A')],
                      finish_reason="length"), "messages", MESSAGES)
    assert status == 200 and message["stop_reason"] == "max_tokens"
    assert all(b["type"] != "tool_use" for b in message["content"])
    assert '"arguments": {"key": "A' in message["content"][0]["text"]


async def test_an_object_input_still_becomes_a_tool_use_block() -> None:
    status, message, _ = await _ask(
        ScriptedReply(content=None, tool_calls=[ScriptedToolCall(name="lookup", arguments='{"key": "A"}')]),
        "messages", MESSAGES)
    assert status == 200 and message["stop_reason"] == "tool_use"
    assert message["content"][-1]["type"] == "tool_use" and message["content"][-1]["input"] == {"key": "A"}


async def test_a_messages_program_sending_a_non_object_input_is_refused_as_the_api_does() -> None:
    body = {**MESSAGES, "messages": [
        {"role": "user", "content": "look up A"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "lookup", "input": "A"}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "42"}]}]}
    status, answer, session = await _ask(ScriptedReply(content="ok"), "messages", body)
    assert status == 400 and answer["type"] == "error" and answer["error"]["type"] == "invalid_request_error"
    assert "'input' must be an object, got \"A\"" in answer["error"]["message"]
    assert session.calls == []  # nothing was sampled for it


async def test_responses_arguments_pass_as_written_and_a_missing_one_is_refused() -> None:
    body = {"model": "m", "input": "look up A", "tools": [{"type": "function", "name": "lookup", "parameters": {}}]}
    status, response, _ = await _ask(
        ScriptedReply(content=None, tool_calls=[ScriptedToolCall(name="lookup", arguments='{"key": ')]),
        "responses", body)
    assert status == 200
    call = next(item for item in response["output"] if item["type"] == "function_call")
    assert call["arguments"] == '{"key": '  # OpenAI delivers the string the model wrote, valid JSON or not
    back = {**body, "input": [{"role": "user", "content": "look up A"},
                              {"type": "function_call", "call_id": "c1", "name": "lookup"},
                              {"type": "function_call_output", "call_id": "c1", "output": "42"}]}
    status, error, _ = await _ask(ScriptedReply(content="ok"), "responses", back)
    assert status == 400 and "needs 'arguments', the string the model wrote, got null" in error["error"]["message"]


async def test_one_malformed_call_reaches_every_dialect_as_the_text_the_model_wrote() -> None:
    """One rule on every path (verifiers.gateway.dialects.core): OpenAI's, the arguments as generated."""
    written = '{"key": "A",'
    reply = ScriptedReply(content=None, tool_calls=[ScriptedToolCall(name="lookup", arguments=written)])
    chat_body = {"model": "m", "messages": [{"role": "user", "content": "look up A"}],
                 "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]}
    status, chat, _ = await _ask(reply, "chat/completions", chat_body)
    assert status == 200 and chat["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == written
    responses_body = {"model": "m", "input": "look up A",
                      "tools": [{"type": "function", "name": "lookup", "parameters": {}}]}
    status, response, _ = await _ask(reply, "responses", responses_body)
    calls = [item for item in response["output"] if item["type"] == "function_call"]
    assert status == 200 and [c["arguments"] for c in calls] == [written]
    status, message, _ = await _ask(reply, "messages", MESSAGES)  # no field for it: the text, and the turn ends
    assert status == 200 and message["stop_reason"] == "end_turn"
    assert message["content"] == [{"type": "text", "text": f'<tool_call>\n{{"name": "lookup", "arguments": {written}}}\n</tool_call>'}]
