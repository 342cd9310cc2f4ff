"""arithmetic: problem generation, the MathRubric reward, and rollouts against the scripted server."""

from __future__ import annotations

import inspect
import random
import re

import arithmetic
import pytest
from arithmetic import evaluate, make_problem

import verifiers as vf
import verifiers.testing
from verifiers.testing import ScriptedReply, ScriptedServer, ServerScript


def small_env(**kwargs: object) -> vf.Environment:
    args: dict[str, object] = {"num_train_examples": 20, "num_eval_examples": 5, "seed": 7}
    args.update(kwargs)
    return arithmetic.load_environment(**args)


# -- data ----------------------------------------------------------------------------------


def test_data_is_seeded_sized_and_correct() -> None:
    a, b, c = small_env(), small_env(), small_env(seed=8)
    assert len(a.dataset) == 20 and len(a.eval_dataset) == 5
    assert a.dataset["answer"] == b.dataset["answer"] and a.dataset["info"] == b.dataset["info"]
    assert a.dataset["info"] != c.dataset["info"]
    expressions = [r["info"]["expression"] for r in [*a.dataset, *a.eval_dataset]]
    assert len(set(expressions)) == len(expressions)
    for row in [*a.dataset, *a.eval_dataset]:
        expression = row["info"]["expression"]
        assert row["prompt"][-1]["content"] == f"What is {expression}?"
        assert row["answer"] == str(eval(expression))  # the generator's own tokens; trusted input
        assert not set(re.findall(r"[-+*/]", expression.replace("(-", "("))) - set("+-*")


def test_division_is_exact_and_options_apply() -> None:
    env = small_env(allow_division=True, operations="/", num_terms=3, min_operand=-30, max_operand=30)
    for row in env.dataset:
        expression = row["info"]["expression"]
        assert expression.count("/") == 2
        value = eval(expression)
        assert value == int(value) and row["answer"] == str(int(value))
        operands = [int(x) for x in re.findall(r"-?\d+", expression)]
        assert all(-30 <= x <= 30 for x in operands)


def test_evaluate_uses_precedence() -> None:
    assert evaluate((2, 3, 4), ("+", "*")) == 14
    assert evaluate((20, 4, 2), ("-", "-")) == 14
    assert evaluate((12, 3, 2), ("/", "*")) == 8
    assert evaluate((1, 2, 3, 4), ("-", "*", "+")) == -1
    problem, value = make_problem(random.Random(0), "+-*", 3, 1, 9)
    assert value == eval(problem.expression)


def test_bad_arguments_are_rejected() -> None:
    with pytest.raises(ValueError):
        small_env(operations="^")
    with pytest.raises(ValueError):
        small_env(min_operand=10, max_operand=1)
    with pytest.raises(ValueError):
        small_env(num_terms=1)


# -- reward --------------------------------------------------------------------------------


async def test_math_rubric_reward() -> None:
    rubric = small_env().rubric

    async def score(text: str, answer: str) -> float:
        out = await rubric.score_rollout(
            prompt=[], completion=[{"role": "assistant", "content": text}], answer=answer
        )
        return out.reward

    assert await score("The result is \\boxed{-12}.", "-12") == 1.0
    assert await score("-12", "-12") == 1.0
    assert await score("\\boxed{12}", "-12") == 0.0
    assert await score("I do not know", "-12") == 0.0


# -- rollouts over HTTP --------------------------------------------------------------------


async def test_rollouts_score_right_and_wrong_answers() -> None:
    env = small_env()
    rows = list(env.eval_dataset)
    wrong = rows[0]
    replies = [
        ScriptedReply(
            match=re.escape(wrong["prompt"][-1]["content"]), content=f"\\boxed{{{int(wrong['answer']) + 1}}}"
        )
    ]
    replies += [
        ScriptedReply(
            match=re.escape(r["prompt"][-1]["content"]), content=f"Step by step... \\boxed{{{r['answer']}}}"
        )
        for r in rows[1:]
    ]
    replies.append(ScriptedReply(content="no idea"))
    async with ScriptedServer(ServerScript(replies=replies)) as srv:
        out = await env.a_evaluate(
            vf.make_client(srv.base_url), "scripted", num_examples=5, rollouts_per_example=2
        )
    assert out.error == [None] * 10
    by_answer = dict(zip([r["answer"] for r in rows], [0.0] + [1.0] * 4, strict=True))
    assert out.reward == [by_answer[a] for a in out.answer]
    assert out.metrics["correct_answer_reward_func"] == out.reward
    sent = srv.requests[0]["messages"]
    assert sent[0] == {"role": "system", "content": arithmetic.SYSTEM_PROMPT}


async def test_load_by_id() -> None:
    env = vf.load_environment("arithmetic", num_train_examples=4, num_eval_examples=2, max_operand=9)
    assert env.env_id == "arithmetic"
    assert len(env.dataset) == 4 and len(env.eval_dataset) == 2


async def test_check_environment() -> None:
    testing = verifiers.testing
    if not hasattr(testing, "check_environment"):
        pytest.skip("verifiers.testing.check_environment is not available yet")
    check = getattr(testing, "a_check_environment", None) or testing.check_environment
    report = check(small_env())
    if inspect.isawaitable(report):
        report = await report
    assert getattr(report, "ok", True), report
