"""doublecheck: question generation, the three reward functions, and two-turn rollouts over HTTP."""

from __future__ import annotations

import inspect

import doublecheck
import pytest
from doublecheck import CHALLENGE, consistent, correct_final, correct_first, parsed_answers

import verifiers as vf
import verifiers.testing
from verifiers.testing import ScriptedReply, ScriptedServer, ServerScript

PARSER = vf.Parser(extract_fn=doublecheck.boxed_or_text)


def small_env(**kwargs: object) -> vf.Environment:
    args: dict[str, object] = {"num_train_examples": 20, "num_eval_examples": 5, "seed": 2}
    args.update(kwargs)
    return doublecheck.load_environment(**args)


def chat(first: str, final: str | None = None) -> list[dict[str, str]]:
    out = [{"role": "assistant", "content": first}]
    if final is not None:
        out += [{"role": "user", "content": CHALLENGE}, {"role": "assistant", "content": final}]
    return out


# -- data ----------------------------------------------------------------------------------


def test_data_is_seeded_sized_and_correct() -> None:
    a, b, c = small_env(), small_env(), small_env(seed=3)
    assert len(a.dataset) == 20 and len(a.eval_dataset) == 5
    assert a.dataset["info"] == b.dataset["info"] and a.eval_dataset["answer"] == b.eval_dataset["answer"]
    assert a.dataset["info"] != c.dataset["info"]
    expressions = [r["info"]["expression"] for r in [*a.dataset, *a.eval_dataset]]
    assert len(set(expressions)) == len(expressions)
    for row in [*a.dataset, *a.eval_dataset]:
        expression = row["info"]["expression"]
        assert row["prompt"][-1]["content"] == f"What is {expression}?"
        assert row["answer"] == str(eval(expression))  # generated tokens only; trusted
        assert all(1 <= int(x) <= 50 for x in expression.split()[::2])
    with pytest.raises(ValueError):
        small_env(max_operand=0)


# -- rewards -------------------------------------------------------------------------------


def test_parsed_answers() -> None:
    assert parsed_answers(chat("\\boxed{3}", "hmm, \\boxed{4}"), PARSER) == ["3", "4"]
    assert parsed_answers(chat("  7 "), PARSER) == ["7"]
    assert parsed_answers(chat(""), PARSER) == [None]


@pytest.mark.parametrize(
    ("first", "final", "expected"),
    [
        ("\\boxed{12}", "Yes. \\boxed{12}", (1.0, 1.0, 1.0)),  # right and stays right
        ("\\boxed{11}", "Oops: \\boxed{12}", (1.0, 0.0, 0.0)),  # corrects itself
        ("\\boxed{12}", "Sorry! \\boxed{13}", (0.0, 0.0, 1.0)),  # caves in
        ("\\boxed{10}", "\\boxed{10}", (0.0, 1.0, 0.0)),  # consistently wrong
        ("\\boxed{12.0}", "\\boxed{12}", (1.0, 1.0, 1.0)),  # equal as numbers
        ("\\boxed{12}", None, (1.0, 0.0, 1.0)),  # only one answer: final is the first
        ("", "", (0.0, 0.0, 0.0)),
    ],
)
def test_rewards(first: str, final: str | None, expected: tuple[float, float, float]) -> None:
    completion = chat(first, final)
    got = (
        correct_final(completion, "12", PARSER),
        consistent(completion, PARSER),
        correct_first(completion, "12", PARSER),
    )
    assert got == expected


def test_rubric_weights() -> None:
    rubric = small_env().rubric
    assert rubric.get_reward_func_names() == ["correct_final", "consistent", "correct_first"]
    assert rubric.get_reward_weights() == [1.0, 0.0, 0.0]


# -- rollouts over HTTP --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("first_delta", "final_delta", "metrics"),
    [
        (0, 0, {"correct_final": 1.0, "consistent": 1.0, "correct_first": 1.0}),
        (1, 0, {"correct_final": 1.0, "consistent": 0.0, "correct_first": 0.0}),
        (0, -1, {"correct_final": 0.0, "consistent": 0.0, "correct_first": 1.0}),
    ],
)
async def test_two_turn_rollout(first_delta: int, final_delta: int, metrics: dict[str, float]) -> None:
    env = small_env()
    answer = int(env.eval_dataset[0]["answer"])
    script = ServerScript(
        replies=[
            ScriptedReply(turn=0, content=f"I get \\boxed{{{answer + first_delta}}}."),
            ScriptedReply(
                turn=1, match="^Are you sure", content=f"On reflection: \\boxed{{{answer + final_delta}}}"
            ),
            ScriptedReply(content="unexpected request"),
        ]
    )
    async with ScriptedServer(script) as srv:
        out = await env.a_evaluate(
            vf.make_client(srv.base_url), "scripted", num_examples=1, rollouts_per_example=2
        )
        assert srv.n_requests == 4  # exactly two model turns per rollout
        second_request = next(r for r in srv.requests if len(r["messages"]) == 4)["messages"]
    assert out.error == [None, None] and out.stop_reason == ["completed", "completed"]
    for completion in out.completion:
        assert [m["role"] for m in completion] == ["assistant", "user", "assistant"]
        assert completion[1]["content"] == CHALLENGE
        assert "unexpected" not in completion[-1]["content"]
    assert second_request[-1] == {"role": "user", "content": CHALLENGE}
    for name, value in metrics.items():
        assert out.metrics[name] == [value, value], name
    assert out.reward == [metrics["correct_final"]] * 2


async def test_custom_challenge() -> None:
    env = small_env(challenge="Really? Think again.")
    script = ServerScript(replies=[ScriptedReply(content="\\boxed{1}")])
    async with ScriptedServer(script) as srv:
        out = await env.a_evaluate(vf.make_client(srv.base_url), "scripted", num_examples=1)
    assert out.completion[0][1] == {"role": "user", "content": "Really? Think again."}


async def test_load_by_id() -> None:
    env = vf.load_environment("doublecheck", num_train_examples=3, num_eval_examples=2, max_operand=9)
    assert env.env_id == "doublecheck"
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
