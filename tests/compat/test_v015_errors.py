"""Errors of the same type in the same places as verifiers 0.1.5, and its scoring semantics (issue 26).

Each expected value below was read from 0.1.5's source (file and function cited) and
checked by running 0.1.5 itself (``pip install verifiers==0.1.5`` in a throwaway venv).
Where we differ on purpose the test says so and docs/compat.md lists it.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

import verifiers as vf
from verifiers.errors import ConfigError, EnvError, UnknownTaskError
from verifiers.parsers.xml_parser import XMLParser

ROWS = [{"question": "q", "answer": "a"}]


# -- EnvGroup (0.1.5: verifiers/envs/env_group.py, EnvGroup.__init__ / rollout / get_env_for_task,
#    EnvGroupRubric.score_rollout) ---------------------------------------------------------------
def _envs() -> list[vf.Environment]:
    return [vf.SingleTurnEnv(dataset=ROWS), vf.SingleTurnEnv(dataset=ROWS)]


def test_env_group_construction_errors_are_value_errors() -> None:
    # 0.1.5: ValueError, with these words (0.1.x tests match them), then how to fix it
    with pytest.raises(ValueError, match=r"^EnvGroup requires at least one environment: pass envs="):
        vf.EnvGroup(envs=[])
    with pytest.raises(ValueError, match=r"^Number of env_names must match number of envs: got 2 environments and 1"):
        vf.EnvGroup(envs=_envs(), env_names=["a"])
    # still our ConfigError, which is a ValueError too
    assert issubclass(ConfigError, ValueError)


def test_env_group_default_names_are_0_1_5s() -> None:
    """0.1.5: ``env_names or [f"env_{i}" ...]``, even for environments loaded by id."""
    envs = _envs()
    envs[0].env_id = "loaded-by-id"
    group = vf.EnvGroup(envs=envs)
    assert group.env_names == ["env_0", "env_1"]
    assert group.get_dataset()["task"] == ["env_0", "env_1"]
    assert vf.EnvGroup(envs=_envs(), env_names=[]).env_names == ["env_0", "env_1"]


async def test_unknown_task(caplog: pytest.LogCaptureFixture) -> None:
    envs = _envs()
    group = vf.EnvGroup(envs=envs, env_names=["a", "b"])
    # 0.1.5 rollout: self.env_map[task] -> KeyError
    with pytest.raises(KeyError) as exc:
        await group.rollout(None, "m", [], task="nope")
    assert isinstance(exc.value, UnknownTaskError) and isinstance(exc.value, EnvError)
    assert str(exc.value) == "no environment for task 'nope'; known tasks: ['a', 'b']"
    # 0.1.5 get_env_for_task: self.env_map.get(task, self.envs[0]) (we also warn)
    with caplog.at_level(logging.WARNING):
        assert group.get_env_for_task("nope") is envs[0]
        # 0.1.5 EnvGroupRubric.score_rollout: warning, reward 0 and every metric 0
        score = await group.rubric.score_rollout([], [], "a", {}, task="nope")
    assert score.reward == 0.0 and score.metrics == {} and not score.errors
    assert sum("no environment for task 'nope'" in r.getMessage() for r in caplog.records) == 2


def test_duplicate_env_names_are_refused_on_purpose() -> None:
    """0.1.5 accepted ``env_names=["a", "a"]`` and routed both datasets to the second environment;
    a ConfigError (a ValueError) here. Listed in docs/compat.md."""
    with pytest.raises(ValueError, match="unique"):
        vf.EnvGroup(envs=_envs(), env_names=["a", "a"])


# -- RubricGroup (0.1.5: verifiers/rubrics/rubric_group.py, RubricGroup.__init__) --------------------
def test_rubric_group_without_rubrics_is_a_value_error() -> None:
    with pytest.raises(ValueError, match=r"^RubricGroup must have at least one rubric"):  # 0.1.5's words
        vf.RubricGroup(rubrics=[])


# -- Rubric (0.1.5: verifiers/rubrics/rubric.py, Rubric.call_reward_func / score_rollout) -----------
def boom(completion: Any) -> float:
    raise RuntimeError("boom")


def boom_kwargs(completion: Any, **kwargs: Any) -> float:  # 0.1.5's other branch (**kwargs): same 0.0
    raise ValueError("boom with kwargs")


def needs_foo(foo: Any) -> float:  # 0.1.5 passes no `foo`: TypeError inside the call, scored 0.0
    return 1.0


SEEN: dict[str, Any] = {}


def takes_everything(**kwargs: Any) -> float:
    SEEN.update(kwargs)
    return 1.0


def filtered(completion: Any, answer: str) -> float:  # no **kwargs: only the named arguments
    return 0.5 if answer == "ans" else 0.0


def returns_none(completion: Any) -> Any:
    return None


async def test_scoring_semantics_of_0_1_5() -> None:
    rubric = vf.Rubric(funcs=[boom, boom_kwargs, needs_foo, takes_everything, filtered, returns_none])
    completion = [{"role": "assistant", "content": "a"}]
    score = await rubric.score_rollout([], completion, "ans", {}, "t", {"i": 1}, extra=3)
    # 0.1.5: a failing function scores 0.0, the others count; reward = sum(score * weight)
    assert score.metrics == {
        "boom": 0.0, "boom_kwargs": 0.0, "needs_foo": 0.0, "takes_everything": 1.0, "filtered": 0.5, "returns_none": 0.0
    }  # fmt: skip
    assert score.reward == 1.5
    # 0.1.5 (with **kwargs): prompt, completion, answer, state, task, info, parser and the extra kwargs;
    # we also pass example_id (a function with **kwargs cannot tell unless it lists the keys)
    assert {"prompt", "completion", "answer", "state", "task", "info", "parser", "extra"} <= set(SEEN)
    assert SEEN["extra"] == 3 and SEEN["info"] == {"i": 1} and SEEN["task"] == "t"
    # deliberate: the failures are also recorded (0.1.5 only logged them)
    assert [e.where for e in score.errors] == [
        "reward:boom", "reward:boom_kwargs", "reward:needs_foo", "reward:returns_none"
    ]  # fmt: skip


async def test_call_reward_func_scores_failures_zero(caplog: pytest.LogCaptureFixture) -> None:
    """0.1.5 call_reward_func caught every exception, logged it and returned 0.0."""
    rubric = vf.Rubric(funcs=[boom])
    with caplog.at_level(logging.ERROR):
        assert await rubric.call_reward_func(boom, [], [], "a", {}) == 0.0
        assert await rubric.call_reward_func(boom_kwargs, [], [], "a", {}) == 0.0
        assert await rubric.call_reward_func(needs_foo, [], [], "a", {}) == 0.0
        assert await rubric.call_reward_func(returns_none, [], [], "a", {}) == 0.0
    assert "Error calling reward function boom" in caplog.text
    assert await rubric.call_reward_func(filtered, [], [], "ans", {}) == 0.5


async def test_numeric_string_and_non_finite_scores_differ_on_purpose() -> None:
    """0.1.5 scored ``float(value)``: "0.25" -> 0.25 and nan/inf passed through. We score 0 and
    record a RubricError (docs/compat.md lists it: 0.1.5 code can see this one)."""

    def as_str(completion: Any) -> Any:
        return "0.25"

    score = await vf.Rubric(funcs=[as_str]).score_rollout([], [], "a", {})
    assert score.metrics == {"as_str": 0.0} and score.errors[0].type == "RubricError"


# -- XMLParser (0.1.5: verifiers/parsers/xml_parser.py, XMLParser.__init__ / parse /
#    get_format_reward_func) -----------------------------------------------------------------------
def test_xml_parser_field_validation_types() -> None:
    # 0.1.5's types, and its words first (0.1.x tests may match them)
    with pytest.raises(ValueError, match=r"^Field tuple cannot be empty"):
        XMLParser([()])
    with pytest.raises(TypeError, match=r"^All alternatives in a tuple must be strings"):
        XMLParser([("a", 1)])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"^Each field must be a string or a tuple of strings"):
        XMLParser([["a", "b"]])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"^Each field must be a string or a tuple of strings"):
        XMLParser(["valid", 123])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"^Duplicate field name: a"):
        XMLParser(["a", "a"])


def test_xml_parser_refuses_more_than_0_1_5_on_purpose() -> None:
    """0.1.5 accepted these and misbehaved later (IndexError in the format reward, a tag that
    two fields claim, a tag name that is a regex); ValueError here, as its other value checks."""
    for fields in ([], ["a", ("b", "a")], ["my tag"]):
        with pytest.raises(ValueError):
            XMLParser(fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text, expected",
    [("<think>\n a b \n</think>", "a b"), ("<think>  </think>", ""), ("<think>x</think>", "x"),
     ("<think>\u00a0x\u00a0</think>", "x"), ("<think>\n  two\n  lines  \n</think>", "two\n  lines")],
)  # fmt: skip
def test_parse_strip_false_is_0_1_5s(text: str, expected: str) -> None:
    """0.1.5's pattern ``<tag>\\s*(.*?)\\s*</tag>`` leaves the outer whitespace out of the group,
    so ``strip=False`` gives the same text as the default."""
    parser = XMLParser(["think", "answer"])
    assert parser.parse(text, strip=False).think == expected
    assert parser.parse(text).think == expected


# Values 0.1.5's format_reward_func gives (run on 0.1.5), and ours.
FORMAT_CASES = {
    # well-formed layouts: the same value
    "perfect": ("<think>\nhm\n</think>\n<answer>\n5\n</answer>", 1.0, 1.0),
    "stray text around": ("ok <think>hm</think><answer>5</answer> bye", 0.6, 0.6),
    "missing last field": ("<think>hm</think>", 0.6, 0.6),
    "missing first field": ("<answer>5</answer>", 0.6, 0.6),
    # broken tags: the documented stricter reward (docs/compat.md, "Format reward is strict")
    "nested": ("<think>a<answer>5</answer></think>", 0.8, 0.0),
    "unclosed": ("<think>a</think><answer>5", 0.8, 0.4),
    "no field": ("just text", 0.2, 0.0),
    "repeated field": ("<think>a</think><think>b</think><answer>5</answer>", 1.0, 0.6),
}


@pytest.mark.parametrize("case", list(FORMAT_CASES))
def test_format_reward_values(case: str) -> None:
    text, v015, ours = FORMAT_CASES[case]
    reward = XMLParser(["think", "answer"]).get_format_reward_func()
    assert reward([{"role": "assistant", "content": text}]) == pytest.approx(ours)
    if case in ("perfect", "stray text around", "missing last field", "missing first field"):
        assert ours == pytest.approx(v015)


def test_format_reward_averages_assistant_turns_as_0_1_5() -> None:
    reward = XMLParser(["think", "answer"]).get_format_reward_func()
    perfect, missing = FORMAT_CASES["perfect"][0], FORMAT_CASES["missing last field"][0]
    turns = [
        {"role": "assistant", "content": perfect},
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": missing},
    ]
    assert reward(turns) == pytest.approx(0.8)  # 0.1.5: 0.8
    assert reward([{"role": "user", "content": "x"}]) == 0.0  # 0.1.5: 0.0 without assistant turns
    alt = XMLParser(["think", ("code", "answer")]).get_format_reward_func()
    assert alt([{"role": "assistant", "content": "<think>a</think>\n<code>x</code>"}]) == 1.0  # 0.1.5: 1.0
