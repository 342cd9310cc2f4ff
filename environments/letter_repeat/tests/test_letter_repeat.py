"""letter-repeat: rewards, data and a conformance check over real HTTP."""

from __future__ import annotations

import random

import pytest
from letter_repeat import letter_fraction, load_environment, make_rows, stops_short

import verifiers as vf
from verifiers.testing import ScriptedServer, ServerScript, check_environment


def msg(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


def test_rewards_count_the_letter() -> None:
    assert letter_fraction(msg("b"), "b") == 1.0
    assert letter_fraction(msg("b b"), "b") == 1.0
    assert letter_fraction(msg("bx"), "b") == 0.5
    assert letter_fraction(msg(""), "b") == 0.0
    assert letter_fraction(msg("xyz"), "b") == 0.0
    assert stops_short(msg(" b\n"), "b") == 1.0
    assert stops_short(msg("bb"), "b") == 0.0


def test_markup_tokens_earn_nothing() -> None:
    # the vLLM path once collapsed onto four sampled <tool_call> tokens, which paid 1/11 for "a" and "c"
    for letter in "ac":
        assert letter_fraction(msg("<tool_call>" * 4), letter) == 0.0
        assert letter_fraction(msg("<think>" + letter + "</think><|im_end|>"), letter) == 1.0


def test_rows_use_only_the_given_letters() -> None:
    rows = make_rows(200, "xy", random.Random(1))
    assert {r["answer"] for r in rows} == {"x", "y"}
    assert all(r["question"] == f"Say {r['answer']}" for r in rows)


def test_bad_letters_are_rejected() -> None:
    with pytest.raises(ValueError, match="letters"):
        load_environment(letters="")
    with pytest.raises(ValueError, match="letters"):
        load_environment(letters="a b")


def test_environment_passes_the_checker() -> None:
    report = check_environment(load_environment(num_train_examples=8, num_eval_examples=4))
    assert report.ok, report


def test_scores_over_http() -> None:
    # The scripted server echoes the user's message ("Say c"), so each reward is the share of
    # the letter among "Sayc"'s characters: 0.5 for "a" (it is in "Say"), 0.25 otherwise.
    with ScriptedServer(ServerScript(default="{last_user}")) as srv:
        env = load_environment(letters="abcd", num_train_examples=4, num_eval_examples=16)
        out = env.evaluate(vf.make_client(srv.base_url, max_retries=0), "m", num_examples=16)
    assert len(out.reward) == 16
    expected = [0.5 if a == "a" else 0.25 for a in out.answer]
    assert out.reward == pytest.approx(expected)
    assert {"a", "b"} <= set(out.answer)
