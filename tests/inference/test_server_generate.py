"""``POST /inference/v1/generate``: vLLM's token-in endpoint on vf-serve, checked against vLLM's own
protocol models and the checks a token-in client (prime-rl's renderers) makes on the answer."""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.request
from typing import Any

import pytest

MODEL = "tiny"


def generate(server: Any, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    url = server.base_url.removesuffix("/v1") + "/inference/v1/generate"
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_token_ids_in_the_greedy_continuation_and_its_logprobs_out(server, ref) -> None:
    prompt = ref.encode("Once upon a time")
    status, out = generate(server, {"model": MODEL, "token_ids": prompt, "request_id": "r-1",
                                    "sampling_params": {"max_tokens": 8, "temperature": 0, "logprobs": 2}})
    assert status == 200 and out["request_id"] == "r-1" and out["output_mode"] == "tokens"
    choice = out["choices"][0]
    assert choice["token_ids"] == ref.greedy(prompt, 8)
    assert out["usage"] == {"prompt_tokens": len(prompt), "completion_tokens": len(choice["token_ids"]),
                            "total_tokens": len(prompt) + len(choice["token_ids"])}
    content = choice["logprobs"]["content"]
    assert len(content) == len(choice["token_ids"])
    for token_id, entry in zip(choice["token_ids"], content, strict=True):
        # both spellings of the token, as vLLM's versions wrote them (renderers checks "token_id:<id>")
        assert entry["token_id"] == token_id and entry["token"] == f"token_id:{token_id}"
        assert math.isfinite(entry["logprob"]) and entry["logprob"] <= 0
        tops = entry["top_logprobs"]
        assert len(tops) == 2 and tops[0]["logprob"] >= tops[1]["logprob"]
        assert tops[0]["token_id"] == token_id and tops[0]["rank"] == 1  # greedy: the sampled token is the top one
        assert tops[0]["logprob"] == pytest.approx(entry["logprob"])


def test_vllms_own_protocol_models_read_the_request_and_the_answer(server, ref) -> None:
    protocol = pytest.importorskip("vllm.entrypoints.scale_out.token_in_token_out.protocol")
    body = {"model": MODEL, "token_ids": ref.encode("abc"), "return_token_ids": True,
            "sampling_params": {"max_tokens": 5, "temperature": 1.0, "seed": 3, "n": 2, "logprobs": 0}}
    protocol.GenerateRequest.model_validate(body)  # what we were sent is a request vLLM takes
    status, out = generate(server, body)
    assert status == 200
    parsed = protocol.GenerateTokensResponse.model_validate(out)
    assert [c.index for c in parsed.choices] == [0, 1] and parsed.prompt_token_ids == body["token_ids"]
    assert all(len(c.logprobs.content) == len(c.token_ids) for c in parsed.choices)


def test_text_mode_and_what_is_refused_by_name(server, ref) -> None:
    prompt = ref.encode("hello")
    status, out = generate(server, {"token_ids": prompt, "output_mode": "text",
                                    "sampling_params": {"max_tokens": 6, "temperature": 0,
                                                        "skip_special_tokens": True}})
    assert status == 200 and out["choices"][0]["text"] == ref.decode(out["choices"][0]["token_ids"])
    assert out["choices"][0]["logprobs"] is None
    for body, where in [({"token_ids": []}, "token_ids"),
                        ({"token_ids": [-1]}, "negative"),
                        ({"token_ids": prompt, "stream_options": {"include_usage": True}}, "needs stream=true"),
                        ({"token_ids": prompt, "sampling_params": {"return_sampling_mask": True}},
                         "return_sampling_mask not supported"),
                        ({"token_ids": prompt, "model": "other"}, "does not exist")]:
        status, err = generate(server, body)
        assert 400 <= status < 500 and where in json.dumps(err), (body, err)


def stream(server: Any, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The chunks of a streamed generate, up to ``data: [DONE]`` (which must end it)."""
    url = server.base_url.removesuffix("/v1") + "/inference/v1/generate"
    req = urllib.request.Request(url, data=json.dumps({**body, "stream": True}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        events = [line.removeprefix("data: ") for line in resp.read().decode().split("\n\n") if line]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


STREAMED = 48  # tokens in the streamed answer


def test_a_stream_carries_the_same_tokens_in_vllms_chunk_shapes(server, ref) -> None:
    prompt = ref.encode("Once upon a time")
    chunks = stream(server, {"model": MODEL, "token_ids": prompt, "request_id": "s-1", "return_token_ids": True,
                             "stream_options": {"include_usage": True},
                             "sampling_params": {"max_tokens": STREAMED, "temperature": 0, "logprobs": 1}})
    *token_chunks, last = chunks
    # Streamed, not one answer in one chunk. A reader that falls behind gets what is ready in one chunk
    # (by design), so the answer is long enough that a loaded machine's reader cannot miss every step.
    assert len(token_chunks) >= 2
    ids = [t for c in token_chunks for t in c["choices"][0]["token_ids"]]
    expected = ref.greedy(prompt, STREAMED)
    assert ids == expected  # the non-streamed answer, token for token
    assert token_chunks[0]["prompt_token_ids"] == prompt and all("prompt_token_ids" not in c for c in token_chunks[1:])
    for c in token_chunks:
        (choice,) = c["choices"]
        assert c["request_id"] == "s-1" and len(choice["logprobs"]["content"]) == len(choice["token_ids"])
    assert token_chunks[-1]["choices"][0]["finish_reason"] == ("stop" if expected[-1] in ref.eos_ids else "length")
    assert all(c["choices"][0]["finish_reason"] is None for c in token_chunks[:-1])
    assert last["choices"] == [] and last["usage"] == {"prompt_tokens": len(prompt), "completion_tokens": len(expected),
                                                       "total_tokens": len(prompt) + len(expected)}
    protocol = pytest.importorskip("vllm.entrypoints.scale_out.token_in_token_out.protocol")
    for c in chunks:
        protocol.GenerateTokensStreamResponse.model_validate(c)  # every chunk is one vLLM's client reads


def test_a_stream_of_several_choices_ends_each_once(server, ref) -> None:
    chunks = stream(server, {"token_ids": ref.encode("abc"), "output_mode": "text",
                             "sampling_params": {"max_tokens": 6, "temperature": 1.0, "seed": 5, "n": 2}})
    for index in (0, 1):
        mine = [c["choices"][0] for c in chunks if c["choices"][0]["index"] == index]
        assert [ch["finish_reason"] is not None for ch in mine].count(True) == 1 and mine[-1]["finish_reason"]
        assert "".join(ch["text"] for ch in mine) == ref.decode([t for ch in mine for t in ch["token_ids"]])
        assert all(ch["logprobs"] is None for ch in mine)
