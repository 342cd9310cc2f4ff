"""check_environment: the conformance check passes good environments and names problems of bad ones."""

from __future__ import annotations

import pytest

import verifiers as vf
from verifiers.testing.check import EnvironmentCheckError, a_check_environment, check_environment


def correct(completion, answer, parser) -> float:
    return float(parser.parse_answer(completion) == answer)


def add(a: int, b: int) -> int:
    """Add.

    Args:
        a: first
        b: second
    """
    return a + b


@pytest.mark.timeout(30)
def test_well_formed_single_turn_env_passes() -> None:
    env = vf.SingleTurnEnv(
        dataset=[{"question": f"q{i}", "answer": f"q{i}"} for i in range(4)],
        system_prompt="echo",
        rubric=vf.Rubric(funcs=[correct]),
    )
    report = check_environment(env)
    assert report.ok
    assert report.problems == []
    assert report.reward_funcs == ["correct"]
    assert report.rollouts == 3 * 2 + 3 + 5 * 3  # scripted run + garbage run + the markup replies
    assert report.mean_reward == 1.0  # the default script echoes the question == answer


@pytest.mark.timeout(30)
async def test_well_formed_tool_env_passes_async() -> None:
    env = vf.ToolEnv(
        dataset=[{"question": "q", "answer": "q"}], tools=[add], rubric=vf.ToolRubric(tools=[add])
    )
    report = await a_check_environment(env)
    assert report.ok, report.problems


@pytest.mark.timeout(30)
def test_reward_function_crashing_on_every_input_fails_the_check() -> None:
    def fragile(completion) -> float:
        raise KeyError("no such field")

    env = vf.SingleTurnEnv(dataset=[{"question": "q"}], rubric=vf.Rubric(funcs=[fragile]))
    with pytest.raises(EnvironmentCheckError) as ei:
        check_environment(env)
    msg = str(ei.value)
    assert "reward:fragile" in msg
    assert "KeyError" in msg
    assert isinstance(ei.value, AssertionError)  # pytest shows it as a failed assertion


@pytest.mark.timeout(30)
def test_env_response_raising_fails_the_check() -> None:
    class Broken(vf.MultiTurnEnv):
        async def env_response(self, messages, state, **kwargs):
            raise RuntimeError("env_response is broken")

    env = Broken(dataset=[{"question": "q"}], rubric=vf.Rubric(funcs=[correct]), max_turns=3)
    with pytest.raises(EnvironmentCheckError) as ei:
        check_environment(env)
    msg = str(ei.value)
    assert "failed in the environment" in msg
    assert "RuntimeError" in msg and "env_response is broken" in msg


@pytest.mark.timeout(30)
def test_rubric_without_functions_is_a_problem_in_the_report() -> None:
    env = vf.SingleTurnEnv(dataset=[{"question": "q"}])
    report = check_environment(env, raise_on_problem=False, check_garbage=False)
    assert not report.ok
    assert any("no reward functions" in p for p in report.problems)


def _letter_rows() -> list[dict[str, str]]:
    return [{"question": f"Say {c}", "answer": c} for c in "abcd"]


@pytest.mark.timeout(30)
def test_a_reward_that_pays_for_markup_tokens_fails_the_check() -> None:
    # letter-repeat's reward as it was: four sampled <tool_call> tokens earned 1/11 on "a" and "c"
    def letter_fraction(completion, answer) -> float:
        chars = [c for m in completion if m["role"] == "assistant" for c in m["content"] or "" if not c.isspace()]
        return sum(c == answer for c in chars) / len(chars) if chars else 0.0

    env = vf.SingleTurnEnv(dataset=_letter_rows(), rubric=vf.Rubric(funcs=[letter_fraction]))
    report = check_environment(env, raise_on_problem=False, num_examples=4)
    problems = [p for p in report.problems if p.startswith("markup replies")]
    assert any("'<tool_call><tool_call><tool_call><tool_call>' earns 0.0909" in p for p in problems), problems
    assert all("vf.reply_text" in p for p in problems)


@pytest.mark.timeout(30)
def test_the_same_reward_on_the_text_a_user_reads_passes() -> None:
    def letter_fraction(completion, answer) -> float:
        chars = [c for c in vf.reply_text(completion) if not c.isspace()]
        return sum(c == answer for c in chars) / len(chars) if chars else 0.0

    env = vf.SingleTurnEnv(dataset=_letter_rows(), rubric=vf.Rubric(funcs=[letter_fraction]))
    assert check_environment(env, num_examples=4).ok


@pytest.mark.timeout(30)
def test_a_format_reward_for_empty_tags_fails_the_check_and_xml_parser_pays_none() -> None:
    def tags_present(completion) -> float:  # a format reward that looks at tags only
        return float("<think>" in completion[-1]["content"] and "</think>" in completion[-1]["content"])

    env = vf.SingleTurnEnv(dataset=_letter_rows(), rubric=vf.Rubric(funcs=[tags_present]))
    report = check_environment(env, raise_on_problem=False, num_examples=2)
    assert any("'<think></think>' earns 1.0000" in p for p in report.problems), report.problems
    parser = vf.XMLParser(["think", "answer"])
    fmt = vf.Rubric(funcs=[parser.get_format_reward_func()], parser=parser)
    assert check_environment(vf.SingleTurnEnv(dataset=_letter_rows(), rubric=fmt), num_examples=2).ok
