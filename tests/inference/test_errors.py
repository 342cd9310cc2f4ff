"""Bad input gets OpenAI-format errors: 404 unknown model, 400 naming the field, vLLM's overlong wording, 401.

The overlong message must be the one vLLM sends ("maximum context length"), because
clients (ours included) recognise an overlong prompt by it and end the rollout as
``prompt_too_long`` instead of failing it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

import verifiers as vf
from verifiers.clients import as_chat_client
from verifiers.errors import BadRequestError, OverlongPromptError
from verifiers.inference.engine import InferenceEngine
from verifiers.inference.server.runner import EmbeddedServer

MODEL = "tiny"
MESSAGES = [{"role": "user", "content": "hi"}]
SMALL_CONTEXT = 64
KEY = "sk-local-test-key"


@pytest.fixture(scope="module")
def small_server(tiny_dir) -> Iterator[EmbeddedServer]:
    """A server whose context is only SMALL_CONTEXT tokens."""
    engine = InferenceEngine.from_pretrained(tiny_dir, max_model_len=SMALL_CONTEXT)
    with EmbeddedServer(engine, [MODEL]) as srv:
        yield srv


@pytest.fixture(scope="module")
def small_client(small_server) -> Iterator[openai.OpenAI]:
    c = openai.OpenAI(base_url=small_server.base_url, api_key="EMPTY", max_retries=0, timeout=30)
    yield c
    c.close()


@pytest.fixture(scope="module")
def keyed_server(tiny_dir) -> Iterator[EmbeddedServer]:
    engine = InferenceEngine.from_pretrained(tiny_dir)
    with EmbeddedServer(engine, [MODEL], api_key=KEY) as srv:
        yield srv


def root(server: EmbeddedServer) -> str:
    return server.base_url.removesuffix("/v1")


# -- 404 ---------------------------------------------------------------------------------
def test_unknown_model_is_404(client, server, raw_http) -> None:
    with pytest.raises(openai.NotFoundError) as err:
        client.chat.completions.create(model="gpt-9", messages=MESSAGES, max_tokens=2)
    assert "gpt-9" in err.value.message
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="gpt-9", prompt="x", max_tokens=2)
    status, _, body = raw_http("POST", f"{server.base_url}/chat/completions",
                               {"model": "gpt-9", "messages": MESSAGES})
    assert status == 404
    assert body["error"]["code"] == 404 and body["error"]["param"] == "model"
    assert body["error"]["type"] == "NotFoundError"


# -- 400 naming the field -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", -1),
        ("top_p", 0),
        ("n", 0),
        ("stop", ""),
        ("stop", [f"s{i}" for i in range(17)]),
        ("max_tokens", 0),
        ("top_k", -2),
        ("min_p", 1.5),
        ("repetition_penalty", 0),
        ("top_logprobs", 21),
        ("presence_penalty", 0.5),
        ("min_tokens", -1),
    ],
)
def test_invalid_parameter_is_400_naming_it(client, field: str, value: Any) -> None:
    body: dict[str, Any] = {field: value}
    if field == "top_logprobs":
        body["logprobs"] = True
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=2, extra_body=body)
    assert err.value.status_code == 400
    assert field in err.value.message
    assert err.value.body["param"] == field


def test_top_logprobs_without_logprobs_is_400(client) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=2, top_logprobs=2)
    assert "top_logprobs" in err.value.message


@pytest.mark.parametrize(
    "messages",
    [[], [{"content": "no role"}], [{"role": "wizard", "content": "x"}]],
    ids=["empty", "no-role", "unknown-role"],
)
def test_bad_messages_are_400_not_500(client, messages) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=MODEL, messages=messages, max_tokens=2)
    assert "messages" in err.value.message or err.value.body["param"] == "messages"


@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]", b""], ids=["garbage", "array", "empty"])
def test_body_that_is_not_a_json_object_is_400(server, raw_http, raw: bytes) -> None:
    status, _, body = raw_http("POST", f"{server.base_url}/chat/completions", raw=raw)
    assert status == 400
    assert body["error"]["code"] == 400 and "JSON" in body["error"]["message"]


# -- overlong prompts ---------------------------------------------------------------------
def long_messages(n_chars: int = 2 * SMALL_CONTEXT) -> list[dict[str, str]]:
    return [{"role": "user", "content": "x" * n_chars}]


def test_prompt_longer_than_the_context_is_400_with_vllm_wording(small_client) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        small_client.chat.completions.create(model=MODEL, messages=long_messages(), max_tokens=2)
    assert "maximum context length" in err.value.message
    assert f"{SMALL_CONTEXT} tokens" in err.value.message
    with pytest.raises(openai.BadRequestError) as err:
        small_client.completions.create(model=MODEL, prompt="y" * 2 * SMALL_CONTEXT, max_tokens=2)
    assert "maximum context length" in err.value.message


def test_max_tokens_beyond_the_context_is_400(small_client) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        small_client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=SMALL_CONTEXT)
    assert "maximum context length" in err.value.message


def test_without_max_tokens_generation_stops_at_the_context(small_client) -> None:
    r = small_client.chat.completions.create(model=MODEL, messages=MESSAGES, temperature=0,
                                             extra_body={"ignore_eos": True, "return_token_ids": True})
    assert len(r.prompt_token_ids) + len(r.choices[0].token_ids) == SMALL_CONTEXT
    assert r.choices[0].finish_reason == "length"


async def test_verifiers_client_maps_overlong_prompts(small_server) -> None:
    client = vf.make_client(small_server.base_url, max_retries=0)
    try:
        chat = as_chat_client(client)
        with pytest.raises(OverlongPromptError):
            await chat.chat(MODEL, long_messages(), sampling_args={"max_tokens": 2})
        with pytest.raises(BadRequestError) as err:  # other 400s stay ordinary bad requests
            await chat.chat(MODEL, MESSAGES, sampling_args={"temperature": -1})
        assert not isinstance(err.value, OverlongPromptError)
    finally:
        await client.close()


async def test_rollout_with_an_overlong_prompt_ends_as_prompt_too_long(small_server) -> None:
    rows = [{"question": "hi", "answer": ""}, {"question": "z" * 2 * SMALL_CONTEXT, "answer": ""}]

    def zero(completion: Any) -> float:
        return 0.0

    env = vf.SingleTurnEnv(dataset=rows, rubric=vf.Rubric(funcs=[zero]))
    client = vf.make_client(small_server.base_url, max_retries=0)
    try:
        out = await env.a_evaluate(client, MODEL, sampling_args={"max_tokens": 4})
    finally:
        await client.close()
    assert out.error == [None, None]
    assert out.stop_reason[1] == "prompt_too_long"
    assert out.stop_reason[0] != "prompt_too_long"


# -- API key --------------------------------------------------------------------------------
def test_api_key_is_enforced(keyed_server, raw_http) -> None:
    right = openai.OpenAI(base_url=keyed_server.base_url, api_key=KEY, max_retries=0)
    wrong = openai.OpenAI(base_url=keyed_server.base_url, api_key="sk-wrong", max_retries=0)
    try:
        assert right.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=2).choices
        with pytest.raises(openai.AuthenticationError):
            wrong.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=2)
        with pytest.raises(openai.AuthenticationError):
            wrong.models.list()
    finally:
        right.close()
        wrong.close()
    status, _, body = raw_http("POST", f"{keyed_server.base_url}/chat/completions", {"messages": MESSAGES})
    assert status == 401 and body["error"]["type"] == "AuthenticationError"
    assert raw_http("GET", f"{root(keyed_server)}/health")[0] == 200
