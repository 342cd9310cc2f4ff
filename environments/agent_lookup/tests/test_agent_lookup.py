"""agent-lookup: the shipped program, the rewards, and the scripted expert through the real program."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from agent_lookup import (
    PROGRAM,
    chatty_rows,
    correct_answer,
    expert_rows,
    expert_script,
    load_environment,
    make_rows,
    model_calls,
    right_key_called,
    tool_call_ran,
)

import verifiers as vf
from verifiers.testing import ScriptedServer, check_environment

ROOT = Path(__file__).resolve().parents[3]
KEYS = "ABDEFGHJ"


def call(key: str) -> dict[str, object]:
    return {"id": "c0", "type": "function", "function": {"name": "lookup", "arguments": json.dumps({"key": key})}}


def episode(key: str, result: str, final: str) -> list[dict[str, object]]:
    return [
        {"role": "assistant", "tool_calls": [call(key)]},
        {"role": "tool", "content": result, "tool_call_id": "c0"},
        {"role": "assistant", "content": final},
    ]


def test_the_shipped_program_is_an_ordinary_openai_program() -> None:
    source = PROGRAM.read_text()  # the one copy: docs/agents.md and the tests run it from here
    assert "import verifiers" not in source and "from openai import OpenAI" in source


def test_rows_hide_a_fresh_table_per_example() -> None:
    rows = make_rows(50, KEYS, 4, 2, random.Random(0))
    assert len({json.dumps(r["info"]["table"], sort_keys=True) for r in rows}) > 45
    for r in rows:
        table, key = r["info"]["table"], r["info"]["key"]
        assert len(table) == 4 and key in table and r["answer"] == table[key] and r["question"] == f"look up {key}"


def test_rewards_read_what_the_program_printed_and_sent() -> None:
    info = {"key": "B", "table": {"B": "45"}}
    assert correct_answer({"agent": {"stdout": "45\n"}}, "45") == 1.0
    assert correct_answer({"agent": {"stdout": "the value is 45\n"}}, "45") == 0.0
    assert correct_answer({}, "45") == 0.0  # the program never ran
    good = episode("B", "45", "45")
    assert right_key_called(good, info) == 1.0 and tool_call_ran(good) == 1.0
    assert right_key_called(episode("A", "12", "12"), info) == 0.0
    assert tool_call_ran(episode("Z", "error: no key 'Z'", "")) == 0.0
    assert tool_call_ran([{"role": "assistant", "content": "45"}]) == 0.0  # no tool result at all
    broken = [{"role": "assistant", "tool_calls": [{"function": {"name": "lookup", "arguments": "{"}}]}]
    assert right_key_called(broken, info) == 0.0
    assert model_calls({"agent": {"num_calls": 2}}) == 2.0 and model_calls({}) == 0.0


def test_bad_arguments_are_rejected_with_the_fix() -> None:
    with pytest.raises(ValueError, match="keys must be distinct"):
        load_environment(keys="AAB")
    with pytest.raises(ValueError, match="max_calls"):
        load_environment(max_calls=1)
    with pytest.raises(ValueError, match="does not exist: pass program="):
        load_environment(program="/nonexistent/agent.py")


def test_environment_passes_the_checker() -> None:
    report = check_environment(load_environment(num_train_examples=8, num_eval_examples=4))
    assert report.ok, report


async def test_the_scripted_expert_through_the_program_gives_expert_rows_like_key_lookups() -> None:
    """The program against the scripted expert: every episode correct, two calls, and its SFT row
    renders (tiny chat template, tools as signatures) to exactly the tokens of key-lookup's expert
    episode for the same row, so the two environments' expert data are interchangeable."""
    pytest.importorskip("transformers")
    import sys

    from verifiers.data.templating import apply_chat_template
    from verifiers.models.tiny import build_char_tokenizer

    env = load_environment(num_train_examples=4, num_eval_examples=0, digits=2, seed=5)
    rows = env.get_dataset().rows
    with ScriptedServer(expert_script()) as srv:
        out = await env.a_generate(rows, vf.make_client(base_url=srv.base_url, max_retries=0), "expert")
    assert [r.reward for r in out.results] == [1.0] * 4
    assert all(r.metrics["model_calls"] == 2.0 and r.metrics["right_key_called"] == 1.0 for r in out.results)
    saved = [json.loads(r.model_dump_json()) for r in out.results]  # as vf-eval -s writes them
    expert = expert_rows(saved)
    assert len(expert) == 4 and expert[0]["tools"][0]["function"]["name"] == "lookup"

    sys.path.insert(0, str(ROOT / "environments" / "key_lookup"))
    try:
        from key_lookup import expert_episode
    finally:
        sys.path.remove(str(ROOT / "environments" / "key_lookup"))
    tok = build_char_tokenizer(tool_format="signature")
    for result in saved:
        (ex,) = expert_rows([result])
        row = {"question": result["prompt"][0]["content"], "answer": result["answer"], "info": result["info"]}
        theirs = expert_episode(row, ex["tools"])
        ours_text = apply_chat_template(tok, ex["messages"], tools=ex["tools"], tokenize=False,
                                        add_generation_prompt=False)
        assert ours_text == apply_chat_template(tok, theirs["messages"], tools=theirs["tools"], tokenize=False,
                                                add_generation_prompt=False)


def test_expert_rows_keep_only_correct_finished_episodes() -> None:
    prompt = [{"role": "user", "content": "look up A"}]
    ok = {"prompt": prompt, "completion": episode("A", "12", "12"), "reward": 1.0, "error": None}
    wrong = {**ok, "reward": 0.0}
    failed = {**ok, "error": {"type": "AgentCrashedError", "message": "exit 1"}}
    tools = [{"type": "function", "function": {"name": "lookup"}}]
    (row,) = expert_rows([ok, wrong, failed], tools=tools)
    assert row == {"messages": [*prompt, *ok["completion"]], "tools": tools}
    with pytest.raises(ValueError, match="chat results"):
        expert_rows([{**ok, "prompt": "look up A"}], tools=tools)


def test_chatty_rows_wrap_a_seeded_share_of_answers_which_the_grader_then_refuses() -> None:
    rows = [{"messages": [{"role": "user", "content": f"look up {k}"}, *episode(k, f"{i:02d}", f"{i:02d}")],
             "tools": []} for i, k in enumerate(KEYS * 25)]
    out = chatty_rows(rows, 0.75, seed=3)
    chatty = [r for r in out if r["messages"][-1]["content"].startswith("The value of")]
    assert 0.6 < len(chatty) / len(rows) < 0.9
    for before, after in zip(rows, out, strict=True):
        key, value = before["messages"][1]["tool_calls"][0]["function"]["arguments"], before["messages"][-1]["content"]
        text = after["messages"][-1]["content"]
        assert text in (value, f"The value of {json.loads(key)['key']} is {value}.")
        assert after["messages"][:-1] == before["messages"][:-1]
        # the program prints the answer as it is: a chatty one is not the value
        assert correct_answer({"agent": {"stdout": text + "\n"}}, value) == float(text == value)
    assert rows[0]["messages"][-1]["content"] == "00"  # the input rows are left as they were
    assert chatty_rows(rows, 0.75, seed=3) == out and chatty_rows(rows, 0.75, seed=4) != out
    assert chatty_rows(rows, 0.0) == rows
    with pytest.raises(ValueError, match="between 0 and 1"):
        chatty_rows(rows, 1.5)
    with pytest.raises(ValueError, match="end on the assistant's answer"):
        chatty_rows([{"messages": rows[0]["messages"][:-1]}], 0.5)


def test_the_shipped_chatty_expert_file_is_the_expert_file_made_chatty() -> None:
    """agent_program_rl.toml's warm-up data is reproducible: make_agent_lookup_expert.py --chatty 0.75."""
    data = ROOT / "examples" / "data"
    expert = [json.loads(line) for line in (data / "agent_lookup_expert.jsonl").read_text().splitlines()]
    shipped = [json.loads(line) for line in (data / "agent_lookup_chatty.jsonl").read_text().splitlines()]
    assert shipped == chatty_rows(expert, 0.75, seed=0)
