"""key-lookup: the tool, the rewards, and two-turn tool-using rollouts over real HTTP."""

from __future__ import annotations

import json
import random

import pytest
from key_lookup import (
    correct_answer,
    expert_episode,
    load_environment,
    lookup,
    make_rows,
    model_turns,
    right_key_called,
    tool_call_ran,
)

import verifiers as vf
from verifiers.testing import ScriptedReply, ScriptedServer, ScriptedToolCall, ServerScript, check_environment

KEYS = "ABDEFGHJ"


def call(key: str) -> dict[str, object]:
    return {"id": "c0", "type": "function", "function": {"name": "lookup", "arguments": json.dumps({"key": key})}}


def episode(key: str, result: str, final: str) -> list[dict[str, object]]:
    return [
        {"role": "assistant", "content": None, "tool_calls": [call(key)]},
        {"role": "tool", "content": result, "tool_call_id": "c0"},
        {"role": "assistant", "content": final},
    ]


def script(key_for: dict[str, str], answer: str = "{last_message}") -> ServerScript:
    """Turn 0: call lookup with ``key_for[asked key]``; turn 1: answer with ``answer``."""
    calls = [
        ScriptedReply(turn=0, match=f"look up {k}$", tool_calls=[ScriptedToolCall(name="lookup", arguments=json.dumps({"key": v}))])
        for k, v in key_for.items()
    ]
    return ServerScript(replies=[*calls, ScriptedReply(turn=1, content=answer), ScriptedReply(content="?")])


def test_lookup_reads_the_table_and_names_the_keys_on_a_miss() -> None:
    assert lookup("B", {"A": "123", "B": "456"}) == "456"
    with pytest.raises(KeyError, match="the keys are A, B"):
        lookup("Z", {"B": "456", "A": "123"})


def test_rows_hide_a_fresh_table_per_example() -> None:
    rows = make_rows(50, KEYS, 4, 3, random.Random(0))
    assert len({json.dumps(r["info"]["table"], sort_keys=True) for r in rows}) == 50
    for r in rows:
        table, key = r["info"]["table"], r["info"]["key"]
        assert len(table) == 4 and key in table and r["answer"] == table[key]
        assert r["answer"] not in r["question"] and len(r["answer"]) == 3 and r["answer"].isdigit()


def test_the_model_never_sees_the_table() -> None:
    env = load_environment(num_train_examples=4, num_eval_examples=0)
    (schema,) = env.oai_tools or []
    assert list(schema["function"]["parameters"]["properties"]) == ["key"]
    prompt = json.dumps(env.get_dataset().rows[0]["prompt"])
    assert all(v not in prompt for v in env.get_dataset().rows[0]["info"]["table"].values())


def test_rewards_follow_the_episode() -> None:
    info = {"key": "B", "table": {"B": "456"}}
    good = episode("B", "456", "456")
    assert correct_answer(good, "456") == 1.0 and right_key_called(good, info) == 1.0
    assert tool_call_ran(good, {}) == 1.0 and model_turns(good) == 2.0
    wrong_key = episode("A", "123", "123")
    assert correct_answer(wrong_key, "456") == 0.0 and right_key_called(wrong_key, info) == 0.0
    failed = episode("Z", "no key 'Z'", "456")
    assert tool_call_ran(failed, {"tool_errors": ["KeyError"]}) == 0.0
    guess = [{"role": "assistant", "content": "456"}]  # right by luck, no tool: still only 1 turn
    assert model_turns(guess) == 1.0 and tool_call_ran(guess, {}) == 0.0
    still_calling = good[:1]
    assert correct_answer(still_calling, "456") == 0.0
    garbage = [{"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "lookup", "arguments": "{"}}]}]
    assert right_key_called(garbage, info) == 0.0


def test_bad_arguments_are_rejected() -> None:
    with pytest.raises(ValueError, match="keys must be distinct"):
        load_environment(keys="AAB")
    with pytest.raises(ValueError, match="num_keys"):
        load_environment(keys="AB", num_keys=3)
    with pytest.raises(ValueError, match="max_turns"):
        load_environment(max_turns=1)


def test_environment_passes_the_checker() -> None:
    report = check_environment(load_environment(num_train_examples=8, num_eval_examples=4))
    assert report.ok, report


def test_a_tool_user_scores_and_a_wrong_key_does_not() -> None:
    env = load_environment(num_train_examples=4, num_eval_examples=8, seed=3, call_credit=0.25)
    with ScriptedServer(script({k: k for k in KEYS})) as srv:
        out = env.evaluate(vf.make_client(srv.base_url, max_retries=0), "m", num_examples=8)
    assert out.reward == [1.25] * 8  # the answer (1.0) plus the credit for the right call
    assert out.metrics["model_turns"] == [2.0] * 8 and out.metrics["tool_call_ran"] == [1.0] * 8
    shifted = {k: KEYS[(i + 1) % len(KEYS)] for i, k in enumerate(KEYS)}  # always asks for another key
    with ScriptedServer(script(shifted)) as srv:
        out = env.evaluate(vf.make_client(srv.base_url, max_retries=0), "m", num_examples=8)
    assert out.metrics["correct_answer"] == [0.0] * 8 and out.metrics["right_key_called"] == [0.0] * 8


def test_expert_episodes_render_like_a_successful_rollout() -> None:
    from verifiers.data.templating import apply_chat_template

    tok = pytest.importorskip("verifiers.models.tiny").build_char_tokenizer()
    env = load_environment(num_train_examples=2, num_eval_examples=0)
    row = env.get_dataset().rows[0]
    ex = expert_episode(row, env.oai_tools or [])
    text = apply_chat_template(tok, ex["messages"], tools=ex["tools"], add_generation_prompt=False, tokenize=False)
    prompt = apply_chat_template(tok, row["prompt"], tools=env.oai_tools, tokenize=False)
    key = row["info"]["key"]
    assert isinstance(text, str) and isinstance(prompt, str) and text.startswith(prompt)
    assert f'<tool_call>{{"name": "lookup", "arguments": {{"key": "{key}"}}}}</tool_call>' in text
    assert text.endswith(f"<|im_start|>assistant\n{row['answer']}<|im_end|>\n")
