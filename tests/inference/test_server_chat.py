"""/v1/chat/completions with the official openai client: every sampling parameter, logprobs, token ids.

The ground truth is a direct forward pass of the same weights (`Reference` in conftest):
greedy tokens must be its argmax at every position and logprobs its log-softmax.
"""

from __future__ import annotations

import math
from typing import Any

import openai
import pytest

MODEL = "tiny"


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def chat(client: openai.OpenAI, text: str, **kw: Any) -> Any:
    extra = kw.pop("extra_body", {})
    return client.chat.completions.create(
        model=MODEL, messages=user(text), extra_body={"return_token_ids": True, **extra}, **kw
    )


def ids_of(resp: Any, i: int = 0) -> list[int]:
    return list(resp.choices[i].token_ids)


# -- greedy decoding and logprobs against a direct forward pass ----------------------------
@pytest.mark.parametrize("text", ["hello", "The quick brown fox", "0123456789"])
def test_greedy_tokens_are_the_argmax_of_a_direct_forward_pass(client, ref, text) -> None:
    r = chat(client, text, temperature=0, max_tokens=20)
    prompt_ids = list(r.prompt_token_ids)
    out = ids_of(r)
    assert prompt_ids == ref.chat_ids(user(text))
    teacher_forced = ref.log_softmax(prompt_ids, out).argmax(dim=-1).tolist()
    assert out == teacher_forced
    assert r.choices[0].message.content == ref.decode(out)
    if r.choices[0].finish_reason == "stop":
        assert out[-1] in ref.eos_ids
    else:
        assert r.choices[0].finish_reason == "length" and len(out) == 20


def test_logprobs_are_the_raw_log_softmax_of_the_model(client, ref) -> None:
    # temperature 0.7 must not change the reported numbers: logprobs are raw, like vLLM's default.
    r = chat(client, "hello", temperature=0.7, seed=11, max_tokens=12, logprobs=True, top_logprobs=5)
    out = ids_of(r)
    expected = ref.log_softmax(list(r.prompt_token_ids), out)
    content = r.choices[0].logprobs.content
    assert len(content) == len(out)
    for k, (tid, entry) in enumerate(zip(out, content, strict=True)):
        assert entry.token == ref.tokenizer.decode([tid])
        assert abs(entry.logprob - float(expected[k, tid])) < 1e-4
        tops = [t.logprob for t in entry.top_logprobs]
        assert tops == sorted(tops, reverse=True) and len(tops) == 5
        want = expected[k].topk(5).values.tolist()
        assert all(abs(a - b) < 1e-4 for a, b in zip(tops, want, strict=True))


def test_greedy_top_logprobs_start_with_the_chosen_token(client) -> None:
    r = chat(client, "Hello, world!", temperature=0, max_tokens=10, logprobs=True, top_logprobs=3)
    for entry in r.choices[0].logprobs.content:
        assert entry.top_logprobs[0].token == entry.token
        assert entry.top_logprobs[0].logprob == pytest.approx(entry.logprob, abs=1e-6)


def test_token_ids_are_the_chat_template_ids_and_decode_to_the_text(client, tokenizer) -> None:
    from verifiers.data.templating import apply_chat_template

    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi there"}]
    r = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=8, seed=1,
                                       extra_body={"return_token_ids": True})
    assert list(r.prompt_token_ids) == list(apply_chat_template(tokenizer, messages))
    assert tokenizer.decode(ids_of(r), skip_special_tokens=True) == r.choices[0].message.content


def test_token_ids_are_absent_unless_asked(client) -> None:
    r = client.chat.completions.create(model=MODEL, messages=user("hello"), max_tokens=3)
    assert getattr(r, "prompt_token_ids", None) is None
    assert getattr(r.choices[0], "token_ids", None) is None


# -- sampling parameters ------------------------------------------------------------------
def test_same_seed_same_output_different_seed_different_output(client) -> None:
    a = chat(client, "hello", temperature=1.0, seed=123, max_tokens=16, extra_body={"ignore_eos": True})
    b = chat(client, "hello", temperature=1.0, seed=123, max_tokens=16, extra_body={"ignore_eos": True})
    c = chat(client, "hello", temperature=1.0, seed=124, max_tokens=16, extra_body={"ignore_eos": True})
    assert ids_of(a) == ids_of(b)
    assert ids_of(a) != ids_of(c)


@pytest.mark.parametrize(
    "extra",
    [{"top_k": 1}, {"top_p": 1e-6}, {"min_p": 1.0}],
    ids=["top_k=1", "top_p=tiny", "min_p=1"],
)
def test_filters_that_leave_one_token_equal_greedy(client, running_prompt, extra) -> None:
    text, greedy = running_prompt
    r = chat(client, text, temperature=1.0, max_tokens=16, extra_body=dict(extra))
    assert ids_of(r) == greedy[:16]


def test_top_k_samples_only_among_the_k_most_likely(client, ref, running_prompt) -> None:
    text, _ = running_prompt
    r = chat(client, text, temperature=1.5, seed=5, n=4, max_tokens=16, extra_body={"top_k": 3})
    prompt_ids = list(r.prompt_token_ids)
    for i in range(4):
        out = ids_of(r, i)
        top3 = ref.log_softmax(prompt_ids, out).topk(3).indices.tolist()
        assert all(tok in allowed for tok, allowed in zip(out, top3, strict=True))


def test_min_p_samples_only_tokens_near_the_most_likely(client, ref, running_prompt) -> None:
    # As in vLLM, min_p compares probabilities after temperature scaling: p_T(tok) >= min_p * max p_T,
    # i.e. logit(tok) - max logit >= T * log(min_p).
    text, _ = running_prompt
    temperature, min_p = 1.5, 0.5
    r = chat(client, text, temperature=temperature, seed=6, n=4, max_tokens=16, extra_body={"min_p": min_p})
    prompt_ids = list(r.prompt_token_ids)
    for i in range(4):
        out = ids_of(r, i)
        lp = ref.log_softmax(prompt_ids, out)
        for k, tok in enumerate(out):
            assert float(lp[k, tok] - lp[k].max()) >= temperature * math.log(min_p) - 1e-5


def test_repetition_penalty_matches_vllm_semantics_and_changes_greedy(client, ref) -> None:
    text = "hello"
    plain = chat(client, text, temperature=0, max_tokens=20)
    penalised = chat(client, text, temperature=0, max_tokens=20, extra_body={"repetition_penalty": 1.5})
    assert ids_of(penalised) == ref.greedy_chat(text, 20, repetition_penalty=1.5)
    assert ids_of(penalised) != ids_of(plain)


def test_max_tokens_ends_with_length_and_exact_count(client, running_prompt) -> None:
    text, _ = running_prompt
    r = chat(client, text, temperature=0, max_tokens=7)
    assert r.choices[0].finish_reason == "length"
    assert len(ids_of(r)) == 7
    assert r.usage.completion_tokens == 7
    r2 = client.chat.completions.create(model=MODEL, messages=user(text), temperature=0,
                                        max_completion_tokens=5, extra_body={"return_token_ids": True})
    assert len(ids_of(r2)) == 5 and r2.choices[0].finish_reason == "length"


def test_natural_stop_is_eos_with_finish_reason_stop(client, stopping_prompt) -> None:
    text, greedy = stopping_prompt
    r = chat(client, text, temperature=0, max_tokens=24)
    assert ids_of(r) == greedy
    assert r.choices[0].finish_reason == "stop"


def _stop_string(text: str) -> tuple[str, int]:
    """A two-character stop string taken from the middle of ``text`` and where it first occurs."""
    s = text[4:6]
    return s, text.find(s)


def test_stop_string_cuts_the_text_and_is_not_included(client, running_prompt) -> None:
    text, _ = running_prompt
    full = chat(client, text, temperature=0, max_tokens=24).choices[0].message.content
    stop, at = _stop_string(full)
    r = chat(client, text, temperature=0, max_tokens=24, stop=[stop, "never-there"])
    assert r.choices[0].message.content == full[:at]
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].stop_reason == stop
    r_str = chat(client, text, temperature=0, max_tokens=24, stop=stop)
    assert r_str.choices[0].message.content == full[:at]


def test_include_stop_str_in_output_keeps_the_stop_string(client, running_prompt) -> None:
    text, _ = running_prompt
    full = chat(client, text, temperature=0, max_tokens=24).choices[0].message.content
    stop, at = _stop_string(full)
    r = chat(client, text, temperature=0, max_tokens=24, stop=stop,
             extra_body={"include_stop_str_in_output": True})
    assert r.choices[0].message.content == full[: at + len(stop)]


def test_stop_token_ids_end_generation_at_that_token(client, running_prompt) -> None:
    text, greedy = running_prompt
    stop_id = greedy[3]
    cut = greedy.index(stop_id) + 1
    r = chat(client, text, temperature=0, max_tokens=24, extra_body={"stop_token_ids": [stop_id]})
    assert ids_of(r) == greedy[:cut]
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].stop_reason == stop_id


def test_min_tokens_forbids_eos_and_stop_tokens_until_reached(client, ref, stopping_prompt) -> None:
    text, greedy = stopping_prompt
    want = len(greedy) + 3
    r = chat(client, text, temperature=0, max_tokens=want + 10, extra_body={"min_tokens": want})
    out = ids_of(r)
    assert len(out) >= want
    assert not set(out[:want - 1]) & ref.eos_ids
    assert out[: len(greedy) - 1] == greedy[:-1]  # identical until the EOS it was denied
    stop_id = greedy[0]
    r2 = chat(client, text, temperature=0, max_tokens=12,
              extra_body={"min_tokens": 4, "stop_token_ids": [stop_id]})
    assert stop_id not in ids_of(r2)[:4]


def test_ignore_eos_generates_exactly_max_tokens(client, stopping_prompt) -> None:
    text, greedy = stopping_prompt
    r = chat(client, text, temperature=0, max_tokens=len(greedy) + 6, extra_body={"ignore_eos": True})
    out = ids_of(r)
    assert len(out) == len(greedy) + 6
    assert out[: len(greedy)] == greedy  # the EOS was generated, then ignored
    assert r.choices[0].finish_reason == "length"


def test_n_choices_have_distinct_indices_and_usage_adds_up(client) -> None:
    r = chat(client, "hello", temperature=1.0, seed=3, n=3, max_tokens=10)
    assert sorted(c.index for c in r.choices) == [0, 1, 2]
    outs = [ids_of(r, i) for i in range(3)]
    assert len({tuple(o) for o in outs}) > 1  # independent samples
    assert r.usage.prompt_tokens == len(r.prompt_token_ids)
    assert r.usage.completion_tokens == sum(len(o) for o in outs)
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


async def test_async_client_gets_the_same_greedy_output(client, aclient) -> None:
    sync = chat(client, "zebra", temperature=0, max_tokens=12)
    a = await aclient.chat.completions.create(model=MODEL, messages=user("zebra"), temperature=0, max_tokens=12,
                                              extra_body={"return_token_ids": True})
    assert list(a.choices[0].token_ids) == ids_of(sync)
    assert a.choices[0].message.content == sync.choices[0].message.content


# -- utility endpoints --------------------------------------------------------------------
def test_models_lists_the_served_name(client, engine) -> None:
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert models.data[0].max_model_len == engine.max_model_len


def test_health_tokenize_and_detokenize(server, ref, raw_http) -> None:
    root = server.base_url.removesuffix("/v1")
    status, _, body = raw_http("GET", f"{root}/health")
    assert status == 200 and body["status"] == "ok"
    messages = user("hi")
    status, _, body = raw_http("POST", f"{root}/tokenize", {"model": MODEL, "messages": messages})
    assert status == 200 and body["tokens"] == ref.chat_ids(messages) and body["count"] == len(body["tokens"])
    status, _, body = raw_http("POST", f"{root}/tokenize", {"prompt": "a b\n"})
    assert body["tokens"] == ref.encode("a b\n")
    status, _, body = raw_http("POST", f"{root}/detokenize", {"tokens": ref.encode("round trip")})
    assert status == 200 and body["prompt"] == "round trip"
