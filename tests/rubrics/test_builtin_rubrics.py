"""JudgeRubric (against a second scripted server), MathRubric and ToolRubric."""

from __future__ import annotations

import pytest

import verifiers as vf
from verifiers.testing import ScriptedReply, ScriptedServer, ServerScript


async def judge_correct(judge, prompt, completion, answer, state) -> float:
    verdict = await judge(prompt, completion, answer, state)
    return 1.0 if "yes" in verdict.lower() else 0.0


def judge_script() -> ServerScript:
    # The judge says yes when the response block holds the ground truth "Paris".
    return ServerScript(
        model="judge",
        replies=[
            ScriptedReply(match=r"Response:\n```\nParis\n```", content="Yes"),
            ScriptedReply(content="no"),
        ],
    )


ROWS = [
    {"question": "Paris", "answer": "Paris"},  # the policy echoes: "Paris" → judged yes
    {"question": "Lyon", "answer": "Paris"},  # echoes "Lyon" → judged no
]


async def test_judge_rubric_yes_and_no(server: ScriptedServer, make_server, make_client, client) -> None:
    judge_server = make_server(judge_script())
    judge_client = make_client(judge_server.base_url)
    rubric = vf.JudgeRubric(judge_client=judge_client, judge_model="judge-model", funcs=[judge_correct])
    env = vf.SingleTurnEnv(dataset=ROWS, rubric=rubric)
    out = await env.a_evaluate(client, "policy")
    assert out.reward == [1.0, 0.0]
    assert [r.scoring_errors for r in out.results] == [[], []]
    # The judge saw the default prompt filled with question, answer and response.
    assert judge_server.n_requests == 2
    bodies = sorted(judge_server.requests, key=lambda b: b["messages"][0]["content"])
    assert all(b["model"] == "judge-model" for b in bodies)
    text = next(b["messages"][0]["content"] for b in bodies if "Lyon" in b["messages"][0]["content"])
    assert "Question:\n```\nLyon\n```" in text
    assert "Ground truth answer:\n```\nParis\n```" in text
    assert 'Respond either "yes" or "no" only.' in text
    # The policy server never saw judge prompts.
    assert all(b["model"] == "policy" for b in server.requests)
    # The verdict is cached in the state.
    assert list(out.results[0].state["judge_response"].values()) == ["Yes"]


def test_judge_rubric_sync_evaluate_twice(server: ScriptedServer, make_server) -> None:
    """The judge client is used from the fresh loops of sync evaluate, twice."""
    judge_server = make_server(judge_script())
    rubric = vf.JudgeRubric(
        judge_client=vf.make_client(judge_server.base_url, max_retries=0), funcs=[judge_correct]
    )
    env = vf.SingleTurnEnv(dataset=ROWS, rubric=rubric)
    client = vf.make_client(server.base_url, max_retries=0)
    for _ in range(2):
        out = env.evaluate(client, "m")
        assert out.reward == [1.0, 0.0]
        assert [r.scoring_errors for r in out.results] == [[], []]


async def test_judge_failure_is_recorded_not_silent(
    server: ScriptedServer, make_server, make_client, client
) -> None:
    judge_server = make_server(ServerScript(error_rate=1.0, error_statuses=[500]))
    rubric = vf.JudgeRubric(
        judge_client=make_client(judge_server.base_url, max_retries=0), funcs=[judge_correct]
    )

    def other(completion) -> float:
        return 0.25

    rubric.add_reward_func(other)
    env = vf.SingleTurnEnv(dataset=ROWS, rubric=rubric)
    out = await env.a_evaluate(client, "m")
    for r in out.results:
        assert r.error is None
        assert r.metrics == {"judge_correct": 0.0, "other": 0.25}
        assert r.reward == 0.25
        assert len(r.scoring_errors) == 1
        err = r.scoring_errors[0]
        assert err.type == "JudgeError"
        assert err.where == "reward:judge_correct"
        assert "ServerError" in err.message
    assert judge_server.n_errors == 2


async def test_judge_empty_answer_is_judge_error(
    server: ScriptedServer, make_server, make_client, client
) -> None:
    judge_server = make_server(ServerScript(replies=[ScriptedReply(content="   ")]))
    rubric = vf.JudgeRubric(judge_client=make_client(judge_server.base_url), funcs=[judge_correct])
    env = vf.SingleTurnEnv(dataset=ROWS[:1], rubric=rubric)
    out = await env.a_evaluate(client, "m")
    assert out.results[0].scoring_errors[0].type == "JudgeError"
    assert "empty" in out.results[0].scoring_errors[0].message


async def test_judge_custom_prompt(server: ScriptedServer, make_server, make_client, client) -> None:
    judge_server = make_server(ServerScript(replies=[ScriptedReply(content="yes")]))
    rubric = vf.JudgeRubric(
        judge_client=make_client(judge_server.base_url),
        judge_prompt="Q={question} A={answer} R={response} {{other}}",  # str.format: {{ }} are literal
        funcs=[judge_correct],
    )
    env = vf.SingleTurnEnv(dataset=[{"question": "what", "answer": "42"}], rubric=rubric)
    out = await env.a_evaluate(client, "m")
    assert out.reward == [1.0]
    assert judge_server.requests[-1]["messages"][0]["content"] == "Q=what A=42 R=what {other}"


async def test_judge_prompt_substitution_is_single_pass(
    server: ScriptedServer, make_server, make_client, client
) -> None:
    judge_server = make_server(ServerScript(replies=[ScriptedReply(content="yes")]))
    rubric = vf.JudgeRubric(
        judge_client=make_client(judge_server.base_url),
        judge_prompt="Q={question} A={answer} R={response}",
        funcs=[judge_correct],
    )
    # e.g. a question about Python f-strings
    env = vf.SingleTurnEnv(dataset=[{"question": "print(f'{answer}')", "answer": "42"}], rubric=rubric)
    await env.a_evaluate(client, "m")
    assert (
        judge_server.requests[-1]["messages"][0]["content"]
        == "Q=print(f'{answer}') A=42 R=print(f'{answer}')"
    )


# -- MathRubric ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "answer", "expected"),
    [
        (r"The answer is \boxed{1/2}.", "0.5", 1.0),
        (r"\boxed{\frac{1}{2}}", "1/2", 1.0),
        ("42", "42", 1.0),
        (r"So \boxed{41}", "42", 0.0),
        ("I don't know", "42", 0.0),
        ("", "42", 0.0),
    ],
    ids=["boxed-fraction-vs-decimal", "frac-vs-slash", "plain-42", "wrong", "no-number", "empty"],
)
async def test_math_rubric(server: ScriptedServer, client, reply: str, answer: str, expected: float) -> None:
    server.set_script(ServerScript(replies=[ScriptedReply(content=reply)]))
    env = vf.SingleTurnEnv(dataset=[{"question": "q", "answer": answer}], rubric=vf.MathRubric())
    out = await env.a_evaluate(client, "m")
    r = out.results[0]
    assert r.scoring_errors == []
    assert r.metrics == {"correct_answer_reward_func": expected}
    assert r.reward == expected


def test_math_rubric_in_sync_evaluate(server: ScriptedServer) -> None:
    """Sync evaluate from a non-main thread path must not break math-verify's timeouts."""
    server.set_script(ServerScript(replies=[ScriptedReply(content=r"\boxed{3}")]))
    env = vf.SingleTurnEnv(dataset=[{"question": "q", "answer": "3"}], rubric=vf.MathRubric())
    out = env.evaluate(vf.make_client(server.base_url, max_retries=0), "m")
    assert out.reward == [1.0]
    assert out.results[0].scoring_errors == []


def test_math_equal_off_the_main_thread_prints_no_timeout_notice(monkeypatch: pytest.MonkeyPatch,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    """Off the main thread no timeout is passed (SIGALRM); math-verify's "Timeout is disabled" notice
    about it is dropped, while the answer is still checked."""
    import threading

    import math_verify.grader
    import math_verify.parser

    from verifiers.rubrics.math_rubric import math_equal

    # math-verify prints the notice once per process: make this test see its first time.
    monkeypatch.setattr(math_verify.parser, "TIMEOUT_WARNING_SHOWN", False)
    monkeypatch.setattr(math_verify.grader, "TIMEOUT_WARNING_SHOWN", False)
    results: list[bool] = []
    with caplog.at_level("WARNING"):
        worker = threading.Thread(target=lambda: results.extend([math_equal("\\boxed{12}", "12"), math_equal("7", "12")]))
        worker.start()
        worker.join()
    assert results == [True, False]
    assert math_verify.parser.TIMEOUT_WARNING_SHOWN and math_verify.grader.TIMEOUT_WARNING_SHOWN  # it did warn
    assert not [r for r in caplog.records if "Timeout is disabled" in r.getMessage()]


# -- ToolRubric ----------------------------------------------------------------------------


async def test_tool_rubric_counts_per_tool_and_total() -> None:
    def search(q: str) -> str:
        """Search.

        Args:
            q: query
        """
        return q

    def calc(x: int) -> int:
        """Calc.

        Args:
            x: x
        """
        return x

    completion = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "1", "type": "function", "function": {"name": "search", "arguments": "{}"}},
                {"id": "2", "type": "function", "function": {"name": "search", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "content": "r", "tool_call_id": "1"},
        {"role": "tool", "content": "r", "tool_call_id": "2"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "3", "type": "function", "function": {"name": "calc", "arguments": "{}"}}],
        },
        {"role": "assistant", "content": "done"},
    ]
    rubric = vf.ToolRubric(tools=[search, calc])
    score = await rubric.score_rollout(prompt=[], completion=completion)
    assert score.metrics == {"total_tool_calls": 3.0, "search_calls": 2.0, "calc_calls": 1.0}
    assert score.reward == 0.0
    weighted = await vf.ToolRubric(tools=[search], weight=1.0).score_rollout(prompt=[], completion=completion)
    assert weighted.reward == 3.0 + 2.0
    assert (await rubric.score_rollout(prompt="", completion="text")).metrics["total_tool_calls"] == 0.0


def test_reads_a_number_is_what_the_math_grader_reads() -> None:
    """A reply states an answer when MathRubric's parse finds one number: boxed, bare or in prose."""
    from verifiers.rubrics.math_rubric import reads_a_number

    for reply in ("\\boxed{42}", "-7", "So 3 + 4 = 7. The answer is 7.", "\\boxed{1,200}", "3 + 4 = 7"):
        assert reads_a_number(reply), reply
    for reply in ("", "   ", "\\boxed{7", "\\boxed{seven}", "First 7, then 5"):  # cut box, words, two numbers
        assert not reads_a_number(reply), reply
    # and the grader agrees on a prose answer the count calls answered
    rubric = vf.MathRubric()
    assert rubric.correct_answer_reward_func(rubric.parser, "The answer is 7.", "7") == 1.0
    assert rubric.correct_answer_reward_func(rubric.parser, "3 + 4 = 7", "7") == 1.0  # an equation: its rhs
