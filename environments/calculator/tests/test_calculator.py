"""calculator: the safe evaluator, problem generation, and tool-calling rollouts over HTTP."""

from __future__ import annotations

import inspect
import json
import re

import calculator
import pytest
from calculator import calculate, safe_eval

import verifiers as vf
import verifiers.testing
from verifiers.testing import ScriptedReply, ScriptedServer, ScriptedToolCall, ServerScript


def small_env(**kwargs: object) -> vf.Environment:
    args: dict[str, object] = {"num_train_examples": 12, "num_eval_examples": 4, "seed": 3}
    args.update(kwargs)
    return calculator.load_environment(**args)


# -- the tool ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("1 + 2 * 3", "7"),
        ("(1 + 2) * 3", "9"),
        ("-3 + -(-4)", "1"),
        ("+5", "5"),
        ("7 / 2", "3.5"),
        ("8 / 2", "4"),
        ("7 // 2", "3"),
        ("-7 // 2", "-4"),
        ("7 % 3", "1"),
        ("2 ** 10", "1024"),
        ("2 ^ 10", "1024"),
        ("2 ** -1", "0.5"),
        ("10 / 3", "3.33333333333"),
        ("1.5 * 4", "6"),
        (" 12345 * 6789 ", "83810205"),
    ],
)
def test_calculate_evaluates_arithmetic(expression: str, expected: str) -> None:
    assert calculate(expression) == expected


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("__import__('os').system('true')", "function call"),
        ("abs(-1)", "function call"),
        ("x + 1", "name 'x'"),
        ("(1).real", "Attribute"),
        ("'a' * 3", "only numbers"),
        ("True + 1", "only numbers"),
        ("1j * 2", "only numbers"),
        ("[1, 2]", "List"),
        ("3 < 4", "Compare"),
        ("5 & 3", "not allowed"),
        ("1 / 0", "division by zero"),
        ("1 % 0", "division by zero"),
        ("0 ** -1", "division by zero"),
        ("2 ** 101", "exponent 101 is too large"),
        ("9 ** 9 ** 9", "too large"),
        (" * ".join(["10 ** 100"] * 11), "more than 1000 digits"),
        ("1e308 * 10", "too large"),
        ("(-8) ** 0.5", "no real value"),
        ("", "empty"),
        ("1 +", "could not parse"),
        ("1" * 501, "limit is 500"),
        ("(" * 240 + "1" + ")" * 240, "could not parse"),
    ],
)
def test_calculate_refuses_everything_else(expression: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        calculate(expression)


def test_tool_schema_comes_from_the_docstring() -> None:
    (schema,) = small_env().oai_tools
    fn = schema["function"]
    assert fn["name"] == "calculate"
    assert "arithmetic" in fn["description"]
    assert fn["parameters"]["required"] == ["expression"]
    assert fn["parameters"]["properties"]["expression"]["type"] == "string"


# -- data ----------------------------------------------------------------------------------


def test_data_is_seeded_sized_and_solvable() -> None:
    a, b, c = small_env(), small_env(), small_env(seed=4)
    assert len(a.dataset) == 12 and len(a.eval_dataset) == 4
    assert a.dataset["prompt"] == b.dataset["prompt"] and a.eval_dataset["answer"] == b.eval_dataset["answer"]
    assert a.dataset["prompt"] != c.dataset["prompt"]
    train_q = {r["prompt"][-1]["content"] for r in a.dataset}
    assert not train_q & {r["prompt"][-1]["content"] for r in a.eval_dataset}
    kinds = set()
    for row in [*a.dataset, *a.eval_dataset]:
        info = row["info"]
        kinds.add(info["kind"])
        assert row["answer"] == str(safe_eval(info["solution"]))
        # every number of the reference solution appears in the question
        for number in re.findall(r"\d+", info["solution"]):
            assert number in row["prompt"][-1]["content"]
    assert len(kinds) >= 4


# -- rollouts over HTTP --------------------------------------------------------------------


async def test_tool_call_then_answer_scores_full_reward() -> None:
    env = small_env()
    rows = list(env.eval_dataset)
    replies = [
        ScriptedReply(
            turn=0,
            match=re.escape(r["prompt"][-1]["content"]),
            tool_calls=[
                ScriptedToolCall(
                    name="calculate", arguments=json.dumps({"expression": r["info"]["solution"]})
                )
            ],
        )
        for r in rows
    ]
    replies.append(ScriptedReply(turn=1, content="The calculator says \\boxed{{last_message}}."))
    async with ScriptedServer(ServerScript(replies=replies)) as srv:
        out = await env.a_evaluate(vf.make_client(srv.base_url), "scripted", num_examples=4)
    assert out.error == [None] * 4
    assert out.stop_reason == ["completed"] * 4
    for completion, answer in zip(out.completion, out.answer, strict=True):
        assert [m["role"] for m in completion] == ["assistant", "tool", "assistant"]
        assert completion[1]["content"] == answer  # the tool really computed the answer
        assert completion[1]["tool_call_id"] == completion[0]["tool_calls"][0]["id"]
    assert out.reward == [1.0] * 4
    assert out.metrics["correct_answer_reward_func"] == [1.0] * 4
    assert out.metrics["calculate_calls"] == [1.0] * 4
    assert out.metrics["total_tool_calls"] == [1.0] * 4
    assert srv.requests[0]["tools"] == env.oai_tools


async def test_bad_tool_calls_come_back_as_tool_messages() -> None:
    env = small_env()
    script = ServerScript(
        replies=[
            ScriptedReply(
                turn=0,
                tool_calls=[
                    ScriptedToolCall(name="calculate", arguments="{bad"),
                    ScriptedToolCall(name="calculate", arguments='{"expression": "open(\'/etc/passwd\')"}'),
                    ScriptedToolCall(name="calculate", arguments='{"expr": "1 + 1"}'),
                ],
            ),
            ScriptedReply(turn=1, content="I could not compute it: \\boxed{0}"),
        ]
    )
    async with ScriptedServer(script) as srv:
        out = await env.a_evaluate(vf.make_client(srv.base_url), "scripted", num_examples=2)
    assert out.error == [None, None]
    assert out.stop_reason == ["completed", "completed"]
    for completion, state in zip(out.completion, out.state, strict=True):
        assert [m["role"] for m in completion] == ["assistant", "tool", "tool", "tool", "assistant"]
        bad_json, forbidden, wrong_name = (m["content"] for m in completion[1:4])
        assert bad_json.startswith("Error:") and "not valid JSON" in bad_json and "{bad" in bad_json
        assert (
            forbidden.startswith("Error:")
            and "ValueError" in forbidden
            and "function call is not allowed" in forbidden
        )
        assert wrong_name.startswith("Error:") and "expression" in wrong_name
        assert len(state["tool_errors"]) == 3
    assert out.metrics["calculate_calls"] == [3.0, 3.0]
    # the errors reached the model: its second request carries them
    second = next(r for r in srv.requests if len(r["messages"]) > 3)["messages"]
    assert "not valid JSON" in second[-3]["content"]


async def test_max_turns_ends_a_model_that_never_answers() -> None:
    env = small_env(max_turns=2)
    script = ServerScript(
        replies=[
            ScriptedReply(
                tool_calls=[ScriptedToolCall(name="calculate", arguments='{"expression": "1 + 1"}')]
            )
        ]
    )
    async with ScriptedServer(script) as srv:
        out = await env.a_evaluate(vf.make_client(srv.base_url), "scripted", num_examples=1)
    assert out.stop_reason == ["max_turns"]
    assert out.error == [None]
    assert out.reward == [0.0]
    assert sum(m["role"] == "assistant" for m in out.completion[0]) == 2


async def test_load_by_id() -> None:
    env = vf.load_environment("calculator", num_train_examples=3, num_eval_examples=2, max_turns=7)
    assert env.env_id == "calculator"
    assert env.max_turns == 7
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


# -- without the tool, problem kinds, expert episodes, the agent program -------------------


def test_without_tools_the_same_problems_are_asked_with_no_tool() -> None:
    with_tool, without = small_env(), small_env(tools=False)
    assert isinstance(without, vf.SingleTurnEnv) and not getattr(without, "oai_tools", None)
    assert [r["answer"] for r in without.eval_dataset] == [r["answer"] for r in with_tool.eval_dataset]
    assert without.system_prompt == calculator.NO_TOOL_PROMPT and "calculate" not in without.system_prompt


def test_kinds_choose_the_templates_and_unknown_kinds_are_named() -> None:
    env = small_env(kinds=["sharing", "power_mod"])
    assert {r["info"]["kind"] for r in env.get_dataset().rows} == {"sharing", "power_mod"}
    with pytest.raises(ValueError, match=r"unknown problem kinds \['warehose'\]; choose from expression"):
        small_env(kinds=["warehose"])
    with pytest.raises(ValueError, match="cannot run with tools=False"):
        small_env(program=True, tools=False)


def test_expert_episodes_are_correct_and_come_from_the_training_split() -> None:
    env = small_env()
    episodes = calculator.expert_episodes(env, 5)
    train = env.get_dataset().rows
    for episode, row in zip(episodes, train[:5], strict=True):
        call, result, final = episode["messages"][-3:]
        expression = json.loads(call["tool_calls"][0]["function"]["arguments"])["expression"]
        assert calculate(expression) == result["content"] == row["answer"]
        assert final == {"role": "assistant", "content": f"\\boxed{{{row['answer']}}}"}
        assert episode["tools"] == env.oai_tools
    with pytest.raises(ValueError, match="fewer than the 13 episodes"):
        calculator.expert_episodes(env, 13)


def test_the_shipped_expert_file_is_what_the_recipe_generates() -> None:
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    recipe = tomllib.loads((root / "examples" / "configs" / "calculator_smollm2.toml").read_text())
    shipped = [json.loads(line) for line in (root / recipe["expert_data"]).read_text().splitlines()]
    env = calculator.load_environment(**recipe["env_args"])
    assert len(shipped) == 64
    assert shipped == json.loads(json.dumps(calculator.expert_episodes(env, 64)))


def test_the_program_sends_the_environments_prompt_and_tool() -> None:
    from calculator import calculator_agent

    assert calculator_agent.SYSTEM == calculator.SYSTEM_PROMPT
    assert small_env().oai_tools == calculator_agent.TOOLS
    assert calculator_agent.calculate('{"expression": "12 * 12"}') == "144"
    assert calculator_agent.calculate('{"expression": "open(1)"}').startswith("error: ")
    assert calculator_agent.calculate("[1]").startswith("error: arguments must be a JSON object")


async def test_the_program_under_agent_env_calls_the_tool_and_is_scored_on_its_printed_answer() -> None:
    env = small_env(program=True)
    assert isinstance(env, vf.AgentEnv)
    rows = list(env.eval_dataset)
    replies = [
        ScriptedReply(turn=0, match=re.escape(r["prompt"][-1]["content"]),
                      tool_calls=[ScriptedToolCall(name="calculate",
                                                   arguments=json.dumps({"expression": r["info"]["solution"]}))])
        for r in rows
    ]
    replies.append(ScriptedReply(turn=1, content="So it is \\boxed{{last_message}}."))
    async with ScriptedServer(ServerScript(replies=replies)) as srv:
        out = await env.a_evaluate(vf.make_client(srv.base_url), "scripted", num_examples=4)
    assert out.error == [None] * 4
    assert out.reward == [1.0] * 4
    for completion, answer in zip(out.completion, out.answer, strict=True):
        assert [m["role"] for m in completion] == ["assistant", "tool", "assistant"]
        assert completion[1]["content"] == answer
    first = srv.requests[0]
    assert first["tools"] == small_env().oai_tools
    assert first["messages"][0] == {"role": "system", "content": calculator.SYSTEM_PROMPT}


def test_the_printed_answer_reward_reads_the_boxed_number() -> None:
    assert calculator.printed_answer({"agent": {"stdout": "It is \\boxed{1,234}.\n"}}, "1234") == 1.0
    assert calculator.printed_answer({"agent": {"stdout": "1234\n"}}, "1234") == 1.0
    assert calculator.printed_answer({"agent": {"stdout": "\\boxed{1233}"}}, "1234") == 0.0
    assert calculator.printed_answer({}, "1234") == 0.0
