"""agent-arithmetic: the problems, the reward, and the real program against a scripted server."""

from __future__ import annotations

import random

import pytest
from agent_arithmetic import boxed_answer, correct_answer, load_environment, make_rows, model_calls

import verifiers as vf
from verifiers.testing import ScriptedReply, ScriptedServer, ServerScript, check_environment


def test_problems_are_distinct_across_splits_and_answers_are_right() -> None:
    env = load_environment(max_operand=9, num_train_examples=200, num_eval_examples=50)
    train = {r["question"] for r in env.get_dataset().rows}
    evaluation = {r["question"] for r in env.get_eval_dataset().rows}
    assert len(train) == 200 and len(evaluation) == 50 and not train & evaluation
    for row in make_rows(30, 20, random.Random(1), set()):
        a, op, b = row["question"].removeprefix("What is ").removesuffix("?").split()
        assert int(row["answer"]) == {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op]


def test_reward_reads_the_last_boxed_integer_the_program_printed() -> None:
    def state(out: str) -> dict[str, object]:
        return {"agent": {"stdout": out, "num_calls": 2}}

    assert correct_answer(state("so \\boxed{-3}\n"), "-3") == 1.0
    assert correct_answer(state("\\boxed{4} no wait \\boxed{5}"), "5") == 1.0
    assert correct_answer(state("\\boxed{4} no wait \\boxed{5}"), "4") == 0.0
    assert correct_answer(state("9 + 13 = 22\nSo: 22"), "22") == 1.0  # no box: the last integer, as MathRubric
    assert correct_answer(state("\\boxed{22} since 9 + 13 = 21"), "22") == 1.0  # a box wins over later numbers
    assert correct_answer(state("\\Boxed{33}"), "33") == 1.0
    assert correct_answer(state("no number"), "5") == 0.0
    assert correct_answer({}, "5") == 0.0  # the program never ran
    assert boxed_answer(state("\\boxed{ 12 }")) == 1.0 and boxed_answer(state("12")) == 0.0
    assert model_calls(state("")) == 2.0 and model_calls({}) == 0.0


def test_bad_arguments_are_rejected_with_the_fix() -> None:
    with pytest.raises(ValueError, match="max_operand"):
        load_environment(max_operand=0)
    with pytest.raises(ValueError, match="does not exist: pass program="):
        load_environment(program="/nonexistent/agent.py")


def test_environment_passes_the_checker() -> None:
    report = check_environment(load_environment(num_train_examples=8, num_eval_examples=4))
    assert report.ok, report


@pytest.mark.parametrize("check", [True, False])
async def test_the_program_answers_then_checks_through_the_gateway(check: bool) -> None:
    """The shipped program (official openai client) against a scripted model that answers wrong,
    then right when asked to check: the reward is what the program printed last."""
    env = load_environment(num_train_examples=2, num_eval_examples=0, check=check)
    rows = [dict(r) for r in env.get_dataset().rows]
    rows[0]["answer"], rows[1]["answer"] = "5", "6"  # the scripted check says 5
    script = ServerScript(replies=[ScriptedReply(turn=0, content="I think it is \\boxed{100000}."),
                                   ScriptedReply(turn=1, content="\\boxed{5}")])
    with ScriptedServer(script) as srv:
        client = vf.make_client(base_url=srv.base_url, max_retries=0)
        try:
            out = await env.a_generate(rows, client, "scripted")
        finally:
            await client.close()
    assert [r.error for r in out.results] == [None, None]
    assert [r.reward for r in out.results] == ([1.0, 0.0] if check else [0.0, 0.0])
    for r in out.results:
        calls = r.state["agent"]["calls"]
        assert r.metrics["model_calls"] == len(calls) == (2 if check else 1) and r.metrics["boxed_answer"] == 1.0
        assert calls[0].messages[0]["role"] == "system" and calls[0].messages[1]["content"].startswith("What is ")
        if check:  # the reply went back as the SDK hands it over, then the check
            assert calls[1].messages[2] == {"role": "assistant", "content": "I think it is \\boxed{100000}."}
            assert calls[1].messages[3]["content"].startswith("Check your work")
