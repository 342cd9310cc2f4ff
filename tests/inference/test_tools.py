"""Tool calling: the Hermes parser, tools in the chat template, tool_choice, and the HTTP path.

A random tiny model never writes a valid call, so the server's parsing path is driven by
`ScriptedEngine` (conftest), which answers with text we choose through the real server code.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from verifiers.inference.server.tool_parser import parse_tool_calls, tag_prefix_len

MODEL = "tiny"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'


# -- parser ------------------------------------------------------------------------------
def test_parse_single_call_with_leading_text() -> None:
    content, calls = parse_tool_calls("Let me look.\n" + CALL)
    assert content == "Let me look."
    assert len(calls) == 1
    call = calls[0]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}


def test_parse_multiple_calls_with_distinct_ids() -> None:
    text = CALL + '\n<tool_call>{"name": "get_time", "arguments": {}}</tool_call>'
    content, calls = parse_tool_calls(text)
    assert content is None
    assert [c["function"]["name"] for c in calls] == ["get_weather", "get_time"]
    assert len({c["id"] for c in calls}) == 2


def test_parse_arguments_given_as_a_json_string() -> None:
    _, calls = parse_tool_calls('<tool_call>{"name": "f", "arguments": "{\\"x\\": 1}"}</tool_call>')
    assert json.loads(calls[0]["function"]["arguments"]) == {"x": 1}


def test_parse_without_arguments_gives_an_empty_object() -> None:
    _, calls = parse_tool_calls('<tool_call>{"name": "get_time"}</tool_call>')
    assert json.loads(calls[0]["function"]["arguments"]) == {}


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>{"name": "f", "arguments": {x: 1}}</tool_call>',  # malformed JSON
        '<tool_call>{"name": "f", "arguments": {"x": 1}}',  # never closed
        '<tool_call>{"arguments": {"x": 1}}</tool_call>',  # no name
        '<tool_call>{"name": "", "arguments": {}}</tool_call>',  # empty name
        '<tool_call>["f", {}]</tool_call>',  # not an object
        '<tool_call>{"name": "f", "arguments": "{not json"}</tool_call>',  # string arguments, not JSON
        CALL + '<tool_call>{"name": "g", "arguments": {',  # one good call, one broken
    ],
    ids=["bad-json", "unclosed", "no-name", "empty-name", "not-object", "bad-arg-string", "one-broken"],
)
def test_malformed_calls_come_back_as_text(text: str) -> None:
    assert parse_tool_calls(text) == (text, [])


def test_text_without_calls_is_unchanged() -> None:
    assert parse_tool_calls("just words") == ("just words", [])


def test_tag_prefix_len_holds_back_a_possible_opening_tag() -> None:
    assert tag_prefix_len("hello <tool_") == len("<tool_")
    assert tag_prefix_len("hello <") == 1
    assert tag_prefix_len("hello") == 0
    assert tag_prefix_len("a <tool_call") == len("<tool_call")


# -- the chat template and tool_choice on the real model -----------------------------------
def chat(client: openai.OpenAI, **kw: Any) -> Any:
    extra = kw.pop("extra_body", {})
    return client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Weather in Paris?"}],
        extra_body={"return_token_ids": True, **extra}, **kw,
    )


def test_tools_are_rendered_into_the_prompt(client, ref) -> None:
    with_tools = chat(client, tools=[WEATHER], max_tokens=1)
    without = chat(client, max_tokens=1)
    prompt = ref.tokenizer.decode(with_tools.prompt_token_ids)
    assert "# Tools" in prompt and json.dumps(WEATHER["function"]["name"]) in prompt
    assert "Weather for a city." in prompt
    assert "# Tools" not in ref.tokenizer.decode(without.prompt_token_ids)
    expected = ref.chat_ids([{"role": "user", "content": "Weather in Paris?"}], tools=[WEATHER])
    assert list(with_tools.prompt_token_ids) == expected


def test_tool_choice_none_leaves_tools_out_of_the_prompt(client) -> None:
    none = chat(client, tools=[WEATHER], tool_choice="none", max_tokens=1)
    plain = chat(client, max_tokens=1)
    assert list(none.prompt_token_ids) == list(plain.prompt_token_ids)


def test_named_tool_choice_forces_the_call_prefix(client, ref) -> None:
    prefix = '<tool_call>{"name": "get_weather", "arguments": '
    prefix_ids = ref.encode(prefix)
    r = chat(client, tools=[WEATHER, TIME], tool_choice={"type": "function", "function": {"name": "get_weather"}},
             temperature=0, max_tokens=len(prefix_ids) + 4)
    ids = list(r.choices[0].token_ids)
    assert ids[: len(prefix_ids)] == prefix_ids
    assert r.choices[0].message.content.startswith(prefix)
    # After the forced prefix the model continues greedily from it.
    assert ids[len(prefix_ids) :] == ref.greedy([*r.prompt_token_ids, *prefix_ids], 4)


def test_required_tool_choice_forces_an_opening_tag(client, ref) -> None:
    r = chat(client, tools=[WEATHER], tool_choice="required", temperature=0, max_tokens=3)
    ids = list(r.choices[0].token_ids)
    assert ids[0] == ref.tokenizer.convert_tokens_to_ids("<tool_call>")
    assert r.choices[0].message.content.startswith("<tool_call>")


def test_forced_prefix_tokens_carry_their_real_logprobs(client, ref) -> None:
    r = chat(client, tools=[WEATHER], tool_choice="required", temperature=0, max_tokens=3, logprobs=True)
    ids = list(r.choices[0].token_ids)
    expected = ref.log_softmax(list(r.prompt_token_ids), ids)
    got = [e.logprob for e in r.choices[0].logprobs.content]
    assert all(abs(g - float(expected[k, t])) < 1e-4 for k, (g, t) in enumerate(zip(got, ids, strict=True)))


@pytest.mark.parametrize(
    "kw",
    [
        {"tool_choice": "required"},
        {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
        {"tools": [WEATHER], "tool_choice": {"type": "function"}},
    ],
    ids=["required-without-tools", "unknown-named-tool", "malformed-choice"],
)
def test_bad_tool_choice_is_400_naming_tool_choice(client, kw) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        chat(client, max_tokens=1, **kw)
    assert err.value.status_code == 400
    assert "tool_choice" in err.value.message


# -- the HTTP path over scripted model output -------------------------------------------------
def scripted_chat(scripted: Any, reply: str, **kw: Any) -> Any:
    engine, client = scripted
    engine.reply = reply
    return client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Weather in Paris?"}], **kw
    )


def test_server_returns_openai_tool_calls(scripted) -> None:
    r = scripted_chat(scripted, "Checking." + CALL, tools=[WEATHER])
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Checking."
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}


def test_server_returns_several_tool_calls(scripted) -> None:
    reply = CALL + '<tool_call>{"name": "get_time", "arguments": "{}"}</tool_call>'
    r = scripted_chat(scripted, reply, tools=[WEATHER, TIME])
    assert [c.function.name for c in r.choices[0].message.tool_calls] == ["get_weather", "get_time"]
    assert r.choices[0].message.content is None
    assert r.choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize(
    "reply",
    ['<tool_call>{"name": "get_weather", "arguments": {city: Paris}}</tool_call>',
     '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}'],
    ids=["bad-json", "unclosed"],
)
def test_malformed_call_is_returned_as_text_with_status_200(scripted, reply) -> None:
    engine, client = scripted
    engine.reply = reply
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "Weather in Paris?"}], tools=[WEATHER]
    )
    assert raw.status_code == 200
    r = raw.parse()
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].message.content == reply
    assert not r.choices[0].message.tool_calls


def test_call_text_is_plain_content_when_no_tools_were_offered(scripted) -> None:
    r = scripted_chat(scripted, CALL)
    assert r.choices[0].message.content == CALL
    assert not r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason == "stop"


async def test_verifiers_client_reads_the_tool_calls(scripted) -> None:
    import verifiers as vf
    from verifiers.clients import as_chat_client

    engine, sync_client = scripted
    engine.reply = CALL
    client = vf.make_client(str(sync_client.base_url), max_retries=0)
    try:
        resp = await as_chat_client(client).chat(
            MODEL, [{"role": "user", "content": "Weather?"}], tools=[WEATHER]
        )
    finally:
        await client.close()
    assert resp.finish_reason == "tool_calls"
    assert resp.tool_calls[0]["function"]["name"] == "get_weather"
    assert json.loads(resp.tool_calls[0]["function"]["arguments"]) == {"city": "Paris"}


NO_TOOLS_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                     "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def test_a_template_that_drops_tools_is_named_once(model_and_tokenizer: Any, caplog: pytest.LogCaptureFixture) -> None:
    """SmolLM2's template (like this one) renders nothing of ``tools``: a tool request's schemas never
    reach the model, which would look like a model that will not call tools. vf-serve says so once."""
    import copy
    import logging

    from verifiers.inference.engine import InferenceEngine
    from verifiers.inference.server.api import template_drops_tools
    from verifiers.inference.server.runner import EmbeddedServer

    model, tok = model_and_tokenizer
    assert not template_drops_tools(tok)
    plain = copy.deepcopy(tok)
    plain.chat_template = NO_TOOLS_TEMPLATE
    assert template_drops_tools(plain)
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
    with caplog.at_level(logging.WARNING, logger="verifiers.inference.server.api"), \
            InferenceEngine(model, plain, max_batch_size=2) as eng, EmbeddedServer(eng, ["m"]) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0)
        for _ in range(2):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], tools=tools,
                                           max_tokens=2)
        client.close()
    warned = [r for r in caplog.records if "does not render `tools`" in r.getMessage()]
    assert len(warned) == 1 and "m" in warned[0].getMessage()
