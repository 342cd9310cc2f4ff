"""A v1 taskset package, written here, found by id through ``vf.load_environment`` and vf-eval,
and evaluated end to end against the scripted OpenAI-compatible server: the model calls a
``@vf.tool`` of a Toolset, answers, and the saved results carry the rewards and metrics by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import verifiers as vf
import verifiers.v1 as vf1
from verifiers.cli.eval import main
from verifiers.errors import ConfigError
from verifiers.rollout.error_report import RolloutErrorsWarning
from verifiers.testing import ScriptedReply, ScriptedServer, ScriptedToolCall, ServerScript
from verifiers.v1 import TasksetEnv

# The taskset package (calc_quiz: QuizTask, Calc toolset, CalcQuizTaskset) is tests/v1/conftest.py's
# `quiz_package`; this is its `quiz_script` fixture's model.
SCRIPT = ServerScript(
    replies=[
        ScriptedReply(turn=0, tool_calls=[ScriptedToolCall(name="calc_add", arguments='{"a": 2, "b": 3}')]),
        ScriptedReply(content="5"),
    ]
)


def test_discovery_by_id_with_owner_version_and_overrides(quiz_package: Path) -> None:
    env = vf.load_environment("someone/calc-quiz@0.1.0", num_tasks=3, agent={"max_turns": 4})
    assert isinstance(env, TasksetEnv) and env.max_turns == 4
    assert len(env.eval_dataset.rows) == 3 and env.taskset.config.num_tasks == 3
    assert env.rubric.get_reward_func_names() == ["correct", "style", "calls", "turns"]
    assert vf.load_environment("calc-quiz").env_id == "calc-quiz"
    with pytest.raises(ConfigError, match="num_taskz"):
        vf.load_environment("calc-quiz", num_taskz=1)
    with pytest.raises(ConfigError, match="in-process chat loop"):
        vf.load_environment("calc-quiz", agent={"harness": {"id": "codex"}})


async def test_rollouts_call_the_toolset_and_score_by_name(quiz_package: Path) -> None:
    env = vf.load_environment("calc-quiz")
    with ScriptedServer(SCRIPT) as srv:
        from openai import AsyncOpenAI

        client = AsyncOpenAI(base_url=srv.base_url, api_key="x")
        out = await env.a_evaluate(client, "scripted", rollouts_per_example=2, max_concurrent=4)
        tools = [t["function"]["name"] for t in srv.requests[0]["tools"]]
    assert tools == ["calc_add"]
    results = sorted(out.results, key=lambda r: (r.example_id, r.rollout_index))
    assert [r.example_id for r in results] == [0, 0, 1, 1]
    for r in results:
        assert r.error is None and r.scoring_errors == [] and r.stop_reason == "completed"
        assert [m["role"] for m in r.completion] == ["assistant", "tool", "assistant"]
        assert r.completion[1]["content"] == "5"
        trace = r.state["v1"].trace
        assert trace.stop_condition == "agent_completed" and trace.ok and trace.num_turns == 2
    first, second = results[0], results[2]
    assert first.metrics == {"correct": 1.0, "brief": 1.0, "used_tool": 1.0, "calls": 1.0, "turns": 2.0}
    assert first.reward == pytest.approx(2.0 + 0.5 + 0.5)
    assert second.metrics["correct"] == 0.0 and second.reward == pytest.approx(1.0)


async def test_a_stop_hook_ends_the_rollout(quiz_package: Path) -> None:
    env = vf.load_environment("calc-quiz", num_tasks=1)
    script = ServerScript(
        replies=[ScriptedReply(turn=0, content="I give up"), ScriptedReply(content="never")]
    )
    with ScriptedServer(script) as srv:
        from openai import AsyncOpenAI

        out = await env.a_evaluate(AsyncOpenAI(base_url=srv.base_url, api_key="x"), "scripted")
    (r,) = out.results
    assert r.state["v1"].trace.stop_condition == "gave_up" and r.turns == 1
    assert r.metrics["used_tool"] == 0.0 and r.metrics["calls"] == 0.0


def test_vf_eval_saves_rewards_and_metrics(quiz_package: Path, tmp_path: Path) -> None:
    """vf-eval by id against ``python -m verifiers.testing.server`` (spawned as its own process)."""
    out_dir = tmp_path / "out"
    with ScriptedServer.spawn(SCRIPT) as srv:
        code = main(
            ["owner/calc-quiz@0.1.0", "-m", "scripted", "-b", srv.base_url, "-n", "2", "-r", "1",
             "-s", "-o", str(out_dir), "--no-progress", "-a", json.dumps({"num_tasks": 2})]
        )  # fmt: skip
    assert code == 0
    (results,) = out_dir.rglob("results.jsonl")
    rows = sorted(
        (json.loads(line) for line in results.read_text().splitlines()), key=lambda r: r["example_id"]
    )
    assert [r["reward"] for r in rows] == [pytest.approx(3.0), pytest.approx(1.0)]
    assert rows[0]["metrics"] == {"correct": 1.0, "brief": 1.0, "used_tool": 1.0, "calls": 1.0, "turns": 2.0}
    meta = json.loads((results.parent / "metadata.json").read_text())
    assert meta["avg_metrics"]["correct"] == pytest.approx(0.5)


class YesJudge(vf1.Judge[bool]):
    prompt = "Question: {question}\nResponse: {response}\nCorrect? yes/no"

    def parse(self, response: vf1.JudgeResponse) -> bool:
        return response.text.strip().lower().startswith("yes")


async def test_a_judge_called_from_a_reward_reaches_its_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUDGE_KEY", "k")
    with ScriptedServer(ServerScript(replies=[ScriptedReply(content="yes, correct")])) as srv:
        judge = YesJudge(vf1.JudgeConfig(base_url=srv.base_url, api_key_var="JUDGE_KEY", model="judge"))
        trace = vf1.Trace(task=vf1.TraceTask(type="T", data=None))
        result = await judge.evaluate(trace=trace, question="2+3?", response="5")
        sent = srv.requests[0]["messages"][0]["content"]
    assert result.parsed is True and sent == "Question: 2+3?\nResponse: 5\nCorrect? yes/no"
    assert trace.info["judge_calls"][0]["name"] == "yes" and judge.reward_name == "yes"
    monkeypatch.delenv("JUDGE_KEY")
    with pytest.raises(ConfigError, match="JUDGE_KEY"):
        await judge.evaluate(question="q", response="r")


async def test_a_failing_toolset_setup_is_the_rollouts_error_and_is_not_scored(quiz_package: Path) -> None:
    import calc_quiz

    async def broken(self) -> None:
        raise RuntimeError("no database")

    env = vf.load_environment("calc-quiz", num_tasks=1)
    with ScriptedServer(SCRIPT) as srv, pytest.MonkeyPatch.context() as mp:
        from openai import AsyncOpenAI

        mp.setattr(calc_quiz.Calc, "setup", broken)
        with pytest.warns(RolloutErrorsWarning, match="no database"):
            out = await env.a_evaluate(AsyncOpenAI(base_url=srv.base_url, api_key="x"), "scripted")
    (r,) = out.results
    assert r.error is not None and "no database" in r.error.message and r.reward == 0.0 and r.metrics == {}
