"""A v1 taskset under the ``bash`` harness: its own agent program (`verifiers.v1.bash_agent`) run
locally through AgentEnv, the model behind the gateway, the program's conversation scored by the
task's hooks; and the program's tools on their own."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from openai import AsyncOpenAI

import verifiers as vf
from verifiers.errors import ConfigError
from verifiers.testing import ScriptedReply, ScriptedServer, ScriptedToolCall, ServerScript
from verifiers.v1 import bash_agent
from verifiers.v1.program_env import TasksetProgramEnv

PACKAGE = '''
import verifiers.v1 as vf


class ShellData(vf.TaskData):
    answer: str


class ShellTask(vf.Task[ShellData, vf.State]):
    @vf.reward
    async def correct(self, trace, task) -> float:
        return float(trace.last_reply.strip() == task.answer)

    @vf.metric
    async def ran_commands(self, trace) -> float:
        return float(sum(m.content.startswith("exit code 0") for m in trace.tool_messages))


class ShellTaskset(vf.Taskset[ShellTask, vf.TasksetConfig]):
    def load(self):
        yield ShellTask(ShellData(system_prompt="Reply with the number only.",
                                  prompt="What does `echo $((6*7))` print?", answer="42"), self.config.task)


__all__ = ["ShellTaskset"]
'''


@pytest.fixture
def shell_package(taskset_package: Callable[[str, str], Path]) -> Path:
    return taskset_package("shell_quiz", PACKAGE)


async def test_the_bash_program_runs_the_models_command_and_the_task_scores_its_conversation(
        shell_package: Path) -> None:
    env = vf.load_environment("shell-quiz", agent={"harness": "bash", "max_turns": 4})
    assert isinstance(env, TasksetProgramEnv)
    script = ServerScript(replies=[
        ScriptedReply(turn=0, tool_calls=[ScriptedToolCall(name="bash", arguments=json.dumps({"command": "echo $((6*7))"}))]),
        ScriptedReply(content="42"),
    ])
    with ScriptedServer(script) as srv:
        out = await env.a_evaluate(AsyncOpenAI(base_url=srv.base_url, api_key="x"), "scripted",
                                   rollouts_per_example=2, max_concurrent=2)
        first = srv.requests[0]
    assert [t["function"]["name"] for t in first["tools"]] == ["bash", "edit"]
    system = first["messages"][0]["content"]
    assert system.startswith(bash_agent.BASH_PROMPT) and system.endswith("Reply with the number only.")
    for r in out.results:
        assert r.error is None and r.scoring_errors == [], (r.error, r.scoring_errors)
        assert [m["role"] for m in r.completion] == ["assistant", "tool", "assistant"]
        assert r.completion[1]["content"] == "exit code 0\n42\n"  # the program ran the command
        assert r.metrics == {"correct": 1.0, "ran_commands": 1.0} and r.reward == 1.0
        trace = r.state["v1"].trace
        assert trace.stop_condition == "agent_completed" and trace.ok and trace.num_turns == 2
        assert len(trace.calls) == 2 and trace.calls[-1].finish_reason == "stop"
        assert [t["function"]["name"] for t in trace.tools] == ["bash", "edit"]  # the program's own tools


async def test_a_wrong_answer_scores_zero_and_bash_alone_can_be_offered(shell_package: Path) -> None:
    env = vf.load_environment("shell-quiz", agent={"harness": {"id": "bash", "edit": False}})
    with ScriptedServer(ServerScript(replies=[ScriptedReply(content="41")])) as srv:
        out = await env.a_evaluate(AsyncOpenAI(base_url=srv.base_url, api_key="x"), "scripted")
        tools = [t["function"]["name"] for t in srv.requests[0]["tools"]]
    (r,) = out.results
    assert tools == ["bash"]
    assert r.metrics == {"correct": 0.0, "ran_commands": 0.0} and r.reward == 0.0


def test_what_the_program_harness_cannot_run_is_refused(quiz_package: Path) -> None:
    with pytest.raises(ConfigError, match=r"Toolsets.*null harness"):
        vf.load_environment("calc-quiz", agent={"harness": "bash"})  # its Calc toolset is not reached
    with pytest.raises(ConfigError, match=r"vendor's agent program.*'bash'"):
        vf.load_environment("calc-quiz", agent={"harness": "codex"})


def test_the_programs_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "f.txt").write_text("a = 1\nb = 1\n")
    assert bash_agent.call_tool("edit", json.dumps({"path": "f.txt", "old_str": "= 1", "new_str": "= 2"}), 5) == (
        "error: old_str must appear exactly once in f.txt (found 2)")
    assert bash_agent.call_tool("edit", json.dumps({"path": "f.txt", "old_str": "b = 1", "new_str": "b = 2"}), 5) == (
        "edited f.txt")
    assert (tmp_path / "f.txt").read_text() == "a = 1\nb = 2\n"
    assert bash_agent.call_tool("bash", json.dumps({"command": "cat f.txt; exit 3"}), 5) == "exit code 3\na = 1\nb = 2\n"
    assert bash_agent.call_tool("bash", '{"command": ', 5).startswith("error: the arguments of bash are not JSON")
    assert bash_agent.call_tool("bash", json.dumps({"command": "sleep 5"}), 0.2) == (
        "error: the command ran past 0.2 s and was stopped")
    assert bash_agent.call_tool("python", "{}", 5) == "error: no tool named 'python' (the tools are bash and edit)"
    assert bash_agent.call_tool("bash", json.dumps({"command": "printf '\\377ok'"}), 5) == "exit code 0\n\ufffdok"
    assert len(bash_agent.call_tool("bash", json.dumps({"command": "head -c 50000 /dev/zero | tr '\\\\0' x"}), 5)) < 10_200


def test_vf_eval_runs_it_with_v1s_command_line_and_writes_traces(
        shell_package: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from verifiers.cli.eval import main

    monkeypatch.setenv("SHELL_KEY", "k")
    script = ServerScript(replies=[
        ScriptedReply(turn=0, tool_calls=[ScriptedToolCall(name="bash", arguments=json.dumps({"command": "echo 42"}))]),
        ScriptedReply(content="42"),
    ])
    with ScriptedServer.spawn(script) as srv:
        code = main(["shell-quiz", "-m", "scripted", "--client.base-url", srv.base_url, "--client.api-key-var",
                     "SHELL_KEY", "--env.agent.harness.id", "bash", "--env.agent.runtime.type", "subprocess",
                     "--env.agent.max-turns", "3", "-r", "2", "--no-push", "--no-rich", "-o", str(tmp_path / "out")])
    assert code == 0
    (traces,) = (tmp_path / "out").rglob("traces.jsonl")
    records = [json.loads(line) for line in traces.read_text().splitlines()]
    assert len(records) == 2
    for record in records:
        assert record["rewards"] == {"correct": {"score": 1.0, "weight": 1.0}} and record["reward"] == 1.0
        assert record["agent"]["config"]["harness"]["id"] == "bash" and record["stop_condition"] == "agent_completed"
        assert [m["role"] for m in record["messages"]][-3:] == ["assistant", "tool", "assistant"]
