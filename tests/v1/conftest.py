"""The v1 tests' taskset package: ``calc_quiz``, written to tmp_path and put on ``sys.path``.

Its one task type asks for a sum, offers a ``calc_add`` tool (a `Toolset`), and scores the reply
with two weighted rewards (one a mapping of two names), two metrics and a stop hook;
`quiz_script` is a model that calls the tool once, then answers "5" (right for the first task).
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from verifiers.testing import ScriptedReply, ScriptedToolCall, ServerScript

PACKAGE = '''
import verifiers.v1 as vf


class QuizData(vf.TaskData):
    answer: str


class QuizState(vf.State):
    tool_calls: int = 0


class Calc(vf.Toolset[vf.ToolsetConfig, QuizState]):
    @vf.tool
    def add(self, a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: first addend
            b: second addend
        """
        self.state.tool_calls += 1
        return a + b


class QuizTask(vf.Task[QuizData, QuizState]):
    @classmethod
    def toolsets(cls, config):
        return [Calc(vf.ToolsetConfig())]

    @vf.reward(weight=2.0)
    async def correct(self, trace, task) -> float:
        return float(trace.last_reply == task.answer)

    @vf.reward(weight=0.5)
    async def style(self, trace) -> dict:
        return {"brief": float(len(trace.last_reply) <= 3), "used_tool": float(bool(trace.tool_messages))}

    @vf.metric
    async def calls(self, trace, state) -> float:
        return state.tool_calls

    @vf.metric
    async def turns(self, trace) -> float:
        return trace.num_turns

    @vf.stop
    async def gave_up(self, trace: vf.Trace) -> bool:
        return "give up" in trace.last_reply


class QuizConfig(vf.TasksetConfig):
    num_tasks: int = 2


class CalcQuizTaskset(vf.Taskset[QuizTask, QuizConfig]):
    def load(self):
        sums = [(2, 3), (1, 1), (4, 4)]
        for a, b in sums[: self.config.num_tasks]:
            yield QuizTask(QuizData(prompt=f"What is {a}+{b}?", answer=str(a + b)), self.config.task)


__all__ = ["CalcQuizTaskset"]
'''



@pytest.fixture
def quiz_script() -> ServerScript:
    return ServerScript(
        replies=[
            ScriptedReply(turn=0, tool_calls=[ScriptedToolCall(name="calc_add", arguments='{"a": 2, "b": 3}')]),
            ScriptedReply(content="5"),
        ]
    )


@pytest.fixture
def taskset_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str, str], Path]:
    """``taskset_package(name, source)``: a package ``name`` holding ``source``, importable for the test."""

    def write(name: str, source: str) -> Path:
        pkg = tmp_path / "pkgs" / name
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_text(textwrap.dedent(source))
        monkeypatch.syspath_prepend(str(pkg.parent))
        return pkg

    return write


@pytest.fixture
def quiz_package(taskset_package: Callable[[str, str], Path]) -> Path:
    return taskset_package("calc_quiz", PACKAGE)


