"""reverse-text: data generation, rewards, and full rollouts against the scripted server."""

from __future__ import annotations

import inspect

import pytest
import reverse_text
from reverse_text import lcs_length, lcs_reward, lcs_similarity, load_words

import verifiers as vf
import verifiers.testing
from verifiers.testing import ScriptedReply, ScriptedServer, ServerScript


def small_env(**kwargs: object) -> vf.Environment:
    args: dict[str, object] = {"num_train_examples": 10, "num_eval_examples": 4, "seed": 1}
    args.update(kwargs)
    return reverse_text.load_environment(**args)


# -- data ----------------------------------------------------------------------------------


def test_word_list_is_bundled() -> None:
    words = load_words()
    assert 250 <= len(words) <= 400
    assert len(set(words)) == len(words)
    assert all(w.isalpha() and w.islower() for w in words)


def test_data_is_seeded_sized_and_disjoint() -> None:
    a, b, c = small_env(), small_env(), small_env(seed=2)
    assert len(a.dataset) == 10 and len(a.eval_dataset) == 4
    assert a.dataset["question"] == b.dataset["question"]
    assert a.eval_dataset["question"] == b.eval_dataset["question"]
    assert a.dataset["question"] != c.dataset["question"]
    assert not set(a.dataset["question"]) & set(a.eval_dataset["question"])
    for row in [*a.dataset, *a.eval_dataset]:
        text = row["prompt"][-1]["content"]
        assert row["answer"] == text[::-1]
        assert 3 <= len(text.split()) <= 8
        assert text[0].isupper() and text.endswith(".")
        assert row["prompt"][0]["role"] == "system"


def test_word_count_options_and_validation() -> None:
    env = small_env(min_words=2, max_words=2)
    assert all(len(r["prompt"][-1]["content"].split()) == 2 for r in env.dataset)
    eval_only = small_env(num_train_examples=0)
    assert eval_only.dataset is None and len(eval_only.eval_dataset) == 4
    with pytest.raises(ValueError):
        small_env(min_words=5, max_words=2)
    with pytest.raises(ValueError):
        small_env(num_train_examples=0, num_eval_examples=0)


# -- rewards -------------------------------------------------------------------------------


def _reference_lcs(a: str, b: str) -> int:
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


@pytest.mark.parametrize(
    ("a", "b"),
    [("", ""), ("abc", ""), ("abcbdab", "bdcaba"), ("olleh", "hello"), ("aaaa", "aa"), ("xyz", "abc")],
)
def test_lcs_matches_textbook_dp(a: str, b: str) -> None:
    assert lcs_length(a, b) == _reference_lcs(a, b) == lcs_length(b, a)


def test_lcs_similarity() -> None:
    assert lcs_similarity(".olleh", ".olleh") == 1.0
    assert lcs_similarity("", "") == 1.0
    assert lcs_similarity("", "abc") == 0.0
    assert lcs_similarity("abXd", "abcd") == pytest.approx(3 / 4)
    assert lcs_similarity("abcdefgh", "abcd") == pytest.approx(4 / 8)  # padding is punished


def test_lcs_reward_reads_the_answer_tag() -> None:
    parser = vf.XMLParser(["think", "answer"], answer_field="answer")

    def completion(text: str) -> list[dict[str, str]]:
        return [{"role": "assistant", "content": text}]

    assert lcs_reward(completion("<think>x</think><answer>.god</answer>"), ".god", parser) == 1.0
    assert lcs_reward(completion("<answer> .god </answer>"), ".god", parser) == 1.0
    assert lcs_reward(completion(".god"), ".god", parser) == 0.0  # no tag, no answer
    assert lcs_reward(completion("<answer>.gxd</answer>"), ".god", parser) == pytest.approx(3 / 4)


# -- rollouts over HTTP --------------------------------------------------------------------


async def test_perfect_model_scores_full_reward() -> None:
    env = small_env()
    script = ServerScript(
        replies=[ScriptedReply(content="<think>ok</think>\n<answer>{reversed_last_user}</answer>")]
    )
    async with ScriptedServer(script) as srv:
        out = await env.a_evaluate(
            vf.make_client(srv.base_url), "scripted", num_examples=3, rollouts_per_example=2
        )
    assert len(out.reward) == 6
    assert out.error == [None] * 6
    assert out.stop_reason == ["completed"] * 6
    assert out.metrics["lcs_reward"] == [1.0] * 6
    assert out.metrics["format_reward_func"] == [1.0] * 6
    assert out.reward == [pytest.approx(1.2)] * 6
    for completion, answer in zip(out.completion, out.answer, strict=True):
        assert f"<answer>{answer}</answer>" in completion[-1]["content"]


async def test_wrong_and_unformatted_answers_score_low() -> None:
    env = small_env()
    script = ServerScript(
        replies=[
            ScriptedReply(content="{last_user}", turn=0, match="^[A-M]"),  # echo, no tags at all
            ScriptedReply(content="<think>hmm</think><answer>{last_user}</answer>"),  # not reversed
        ]
    )
    async with ScriptedServer(script) as srv:
        out = await env.a_evaluate(vf.make_client(srv.base_url), "scripted", num_examples=4)
    branches = {"tagged": 0, "untagged": 0}
    for prompt, completion, reward, lcs, fmt in zip(
        out.prompt,
        out.completion,
        out.reward,
        out.metrics["lcs_reward"],
        out.metrics["format_reward_func"],
        strict=True,
    ):
        text = prompt[-1]["content"]
        if "<answer>" in completion[-1]["content"]:
            assert fmt == 1.0
            assert 0.0 < lcs < 1.0  # the forward text shares some subsequence with its reversal
            assert lcs == pytest.approx(lcs_similarity(text, text[::-1]))
            branches["tagged"] += 1
        else:
            assert fmt == 0.0 and lcs == 0.0 and reward == 0.0
            branches["untagged"] += 1
    assert branches["tagged"] and branches["untagged"], branches


async def test_load_by_id() -> None:
    env = vf.load_environment("reverse-text", num_train_examples=3, num_eval_examples=2)
    assert env.env_id == "reverse-text"
    assert len(env.dataset) == 3 and len(env.eval_dataset) == 2


async def test_check_environment() -> None:
    testing = verifiers.testing
    if not hasattr(testing, "check_environment"):
        pytest.skip("verifiers.testing.check_environment is not available yet")
    check = getattr(testing, "a_check_environment", None) or testing.check_environment
    report = check(small_env())
    if inspect.isawaitable(report):
        report = await report
    assert getattr(report, "ok", True), report
