"""/v1/completions with the official openai client: prompt forms, logprobs, n, token ids, usage."""

from __future__ import annotations

from typing import Any

import openai
import pytest

MODEL = "tiny"


def complete(client: openai.OpenAI, prompt: Any, **kw: Any) -> Any:
    extra = kw.pop("extra_body", {})
    return client.completions.create(model=MODEL, prompt=prompt, extra_body={"return_token_ids": True, **extra}, **kw)


def test_string_prompt_greedy_matches_the_model(client, ref) -> None:
    r = complete(client, "Once upon a time", temperature=0, max_tokens=12)
    c = r.choices[0]
    prompt_ids = ref.encode("Once upon a time")
    assert list(c.prompt_token_ids) == prompt_ids
    assert list(c.token_ids) == ref.greedy(prompt_ids, 12)
    assert c.text == ref.decode(c.token_ids)
    assert r.usage.prompt_tokens == len(prompt_ids)
    assert r.usage.completion_tokens == len(c.token_ids)


def test_token_id_prompt_equals_the_string_prompt(client, ref) -> None:
    by_text = complete(client, "abc def", temperature=0, max_tokens=10)
    by_ids = complete(client, ref.encode("abc def"), temperature=0, max_tokens=10)
    assert by_ids.choices[0].text == by_text.choices[0].text
    assert list(by_ids.choices[0].token_ids) == list(by_text.choices[0].token_ids)


def test_list_of_prompts_gives_one_choice_each_in_order(client, ref) -> None:
    prompts = ["first prompt", "second", "3"]
    r = complete(client, prompts, temperature=0, max_tokens=8)
    assert [c.index for c in r.choices] == [0, 1, 2]
    for p, c in zip(prompts, r.choices, strict=True):
        assert list(c.prompt_token_ids) == ref.encode(p)
        assert list(c.token_ids) == ref.greedy(ref.encode(p), 8)
    assert r.usage.prompt_tokens == sum(len(ref.encode(p)) for p in prompts)
    assert r.usage.completion_tokens == sum(len(c.token_ids) for c in r.choices)


def test_list_of_token_id_prompts(client, ref) -> None:
    prompts = [ref.encode("alpha"), ref.encode("beta!")]
    r = complete(client, prompts, temperature=0, max_tokens=6)
    assert [list(c.token_ids) for c in r.choices] == [ref.greedy(p, 6) for p in prompts]


def test_n_with_several_prompts_numbers_choices_prompt_major(client, ref) -> None:
    r = complete(client, ["one", "two"], temperature=1.0, seed=9, n=2, max_tokens=5)
    assert [c.index for c in r.choices] == [0, 1, 2, 3]
    one, two = ref.encode("one"), ref.encode("two")
    assert [list(c.prompt_token_ids) for c in r.choices] == [one, one, two, two]
    assert r.usage.completion_tokens == sum(len(c.token_ids) for c in r.choices)


def test_integer_logprobs_match_the_model(client, ref) -> None:
    prompt_ids = ref.encode("logprobs please")
    r = complete(client, "logprobs please", temperature=0.8, seed=2, max_tokens=10, logprobs=3)
    c = r.choices[0]
    out = list(c.token_ids)
    expected = ref.log_softmax(prompt_ids, out)
    assert len(c.logprobs.token_logprobs) == len(out)
    for k, tid in enumerate(out):
        assert abs(c.logprobs.token_logprobs[k] - float(expected[k, tid])) < 1e-4
        top = c.logprobs.top_logprobs[k]
        assert len(top) == 3
        want = expected[k].topk(3)
        assert set(top) == {ref.tokenizer.decode([i]) for i in want.indices.tolist()}
    special = set(ref.tokenizer.all_special_tokens)
    assert "".join(t for t in c.logprobs.tokens if t not in special) == c.text
    assert c.logprobs.text_offset[0] == 0


def test_default_max_tokens_is_sixteen(client) -> None:
    r = complete(client, "go", temperature=0, extra_body={"ignore_eos": True})
    assert len(r.choices[0].token_ids) == 16 and r.choices[0].finish_reason == "length"


def test_stop_string_in_completions(client) -> None:
    full = complete(client, "stop test", temperature=0, max_tokens=20, extra_body={"ignore_eos": True})
    text = full.choices[0].text
    stop = text[5:7]
    r = complete(client, "stop test", temperature=0, max_tokens=20, stop=stop, extra_body={"ignore_eos": True})
    assert r.choices[0].text == text[: text.find(stop)]
    assert r.choices[0].finish_reason == "stop"


@pytest.mark.parametrize("field", [{"echo": True}, {"suffix": "tail"}], ids=["echo", "suffix"])
def test_echo_and_suffix_are_rejected_with_400(client, field) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model=MODEL, prompt="x", max_tokens=2, **field)
    assert next(iter(field)) in err.value.message


async def test_async_client_completions(aclient, ref) -> None:
    r = await aclient.completions.create(model=MODEL, prompt="async", temperature=0, max_tokens=6)
    assert r.choices[0].text == ref.decode(ref.greedy(ref.encode("async"), 6))
