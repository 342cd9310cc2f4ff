"""The v1 authoring surface on its own (no model, no server): decorators, weights, hook argument
injection, mapping-returning hooks, stop hooks, toolsets, views, config overrides."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import verifiers.v1 as vf
from verifiers.errors import ConfigError
from verifiers.v1.configs import AgentOptions
from verifiers.v1.environment import TasksetEnv
from verifiers.v1.loaders import build_taskset


class QAData(vf.TaskData):
    answer: str


class QATask(vf.Task[QAData]):
    @vf.reward(weight=2.0)
    async def exact(self, trace: vf.Trace, task: QAData) -> float:
        return float(trace.last_reply == task.answer)

    @vf.reward
    async def shape(self, trace) -> dict[str, float]:
        return {"short": float(len(trace.last_reply) < 5), "nonempty": float(bool(trace.last_reply))}

    @vf.metric
    async def turns(self, trace) -> float:
        return trace.num_turns

    @vf.metric(priority=5)
    async def sizes(self, trace, state) -> dict[str, float]:
        return {"n_messages": len(trace.messages), "n_artifacts": len(state.artifacts)}

    @vf.reward
    async def needs_box(self, trace, runtime) -> float:  # requires a runtime: skipped in process
        raise AssertionError("not called without a runtime")


def _trace(task: vf.Task, reply: str, prompt: str = "q") -> vf.Trace:
    return vf.Trace(
        task=vf.TraceTask(type="QATask", data=task.data),
        prompt_messages=[vf.UserMessage(content=prompt)],
        completion_messages=[vf.AssistantMessage(content=f"  {reply} ")],
    )


def test_rewards_weights_mappings_metrics_and_injection():
    task = QATask(QAData(prompt="q", answer="42"))
    trace = _trace(task, "42")
    failures = asyncio.run(task.score(trace))
    assert failures == []
    assert trace.last_reply == "42" and trace.num_turns == 1
    assert {k: (r.score, r.weight) for k, r in trace.rewards.items()} == {
        "exact": (1.0, 2.0),
        "short": (1.0, 1.0),
        "nonempty": (1.0, 1.0),
    }
    assert "shape" not in trace.rewards and "needs_box" not in trace.rewards
    assert trace.reward == pytest.approx(4.0)
    assert trace.metrics == {"turns": 1.0, "n_messages": 2.0, "n_artifacts": 0.0}
    assert [f.__name__ for f in task.hooks("metric")] == ["sizes", "turns"]  # priority, then name


def test_a_failing_hook_is_its_own_error_and_others_still_score():
    class Broken(QATask):
        @vf.metric
        async def turns(self, trace) -> float:
            raise RuntimeError("boom")

        @vf.reward
        async def exact(self, trace) -> str:  # not a number: an error, the weight is gone too
            return "yes"

    task = Broken(QAData(prompt="q", answer="42"))
    trace = _trace(task, "nope")
    failures = asyncio.run(task.score(trace))
    assert sorted(w for w, _ in failures) == ["metric:turns", "reward:exact"]
    assert trace.metrics["turns"] is None and trace.rewards["exact"] is None
    assert trace.rewards["nonempty"].score == 1.0


def test_undecorated_override_switches_a_hook_off_and_plugged_functions_replace_by_name():
    class NoShape(QATask):
        def shape(self, trace):  # type: ignore[override]
            return {}

    assert "shape" not in [f.__name__ for f in NoShape(QAData(answer="a")).hooks("reward")]
    plugged = f"{Path(__file__).with_name('plugged_fns.py')}:always_one"
    config = vf.TaskConfig(rewards={"exact": {"weight": 0.5}, "extra": {"fn": plugged}})
    task = QATask(QAData(prompt="q", answer="42"), config)
    trace = _trace(task, "42")
    asyncio.run(task.score(trace))
    assert trace.rewards["exact"].weight == 0.5 and trace.rewards["extra"].score == 1.0


def test_decorators_work_bare_and_called_and_only_tag():
    async def f(trace):
        return 1.0

    assert vf.reward(f) is f and f._vf_reward and f._vf_weight == 1.0
    assert vf.reward(weight=3)(f)._vf_weight == 3.0
    assert vf.stop(priority=2)(f)._vf_priority == 2
    assert vf.tool(name="renamed")(f)._vf_tool_name == "renamed"


def test_scoring_and_stop_hooks_must_be_async_as_upstream_awaits_them():
    def plain(trace):
        return 1.0

    for decorator in (vf.reward, vf.metric, vf.stop, vf.reward(weight=2.0)):
        with pytest.raises(TypeError, match="must be `async def`"):
            decorator(plain)
    assert vf.tool(plain) is plain  # tools may be plain functions there too


class CounterState(vf.State):
    calls: int = 0


class Calc(vf.Toolset[vf.ToolsetConfig, CounterState]):
    @vf.tool
    def add(self, a: int, b: int) -> int:
        """Add two integers."""
        self.state.calls += 1
        return a + b

    @vf.tool(name="mul")
    async def multiply(self, a: int, b: int) -> int:
        """Multiply two integers."""
        return a * b


class Bare(vf.Toolset):
    TOOL_PREFIX = None

    @vf.tool
    def ping(self) -> str:
        """Answer pong."""
        return "pong"


def test_toolset_names_schema_and_state():
    assert sorted(Calc(vf.ToolsetConfig()).tools()) == ["calc_add", "calc_mul"]
    assert list(Bare(vf.ToolsetConfig()).tools()) == ["ping"]
    assert Calc(vf.ToolsetConfig()).state_type() is CounterState and isinstance(Calc(vf.ToolsetConfig()).config, vf.ToolsetConfig)


class CalcTask(vf.Task[QAData, CounterState]):
    @classmethod
    def toolsets(cls, config):
        return [Calc(vf.ToolsetConfig())]

    @vf.stop
    async def too_many_calls(self, t: vf.Trace) -> bool:  # injected by annotation, whatever its name
        return t.state.calls >= 2


class CalcConfig(vf.TasksetConfig):
    n: int = 2
    greeting: str = "hi"


class CalcTaskset(vf.Taskset[CalcTask, CalcConfig]):
    def load(self):
        for i in range(self.config.n):
            yield CalcTask(QAData(prompt=f"{self.config.greeting} {i}", answer=str(i)), self.config.task)


def test_taskset_types_views_and_overrides():
    assert CalcTaskset.task_type() is CalcTask and CalcTaskset.config_type() is CalcConfig
    ts = build_taskset(CalcTaskset, "calc", {"n": 5, "greeting": "yo"})
    assert [t.data.idx for t in ts] == [0, 1, 2, 3, 4] and next(iter(ts)).data.prompt == "yo 0"
    assert [t.data.idx for t in ts.skip(1).take(2)] == [1, 2]
    assert [t.data.idx for t in ts.include(idx=["1:3"])] == [1, 2]
    assert sorted(t.data.idx for t in ts.shuffle(seed=1)) == [0, 1, 2, 3, 4]
    with pytest.raises(ConfigError, match="nope"):
        build_taskset(CalcTaskset, "calc", {"nope": 1})


def test_env_rejects_what_it_cannot_run():
    ts = CalcTaskset()
    with pytest.raises(ConfigError, match="harness': 'null'"):
        TasksetEnv(ts, agent=AgentOptions(harness="bash"))
    with pytest.raises(ConfigError, match=r"Prime Intellect account.*subprocess"):
        TasksetEnv(ts, agent=AgentOptions(runtime="prime"))
    with pytest.raises(ConfigError, match="container runtime"):
        TasksetEnv(ts, agent=AgentOptions(runtime={"type": "docker", "image": "x"}))

    class Remote(CalcTask):
        @classmethod
        def toolsets(cls, config):
            return [Calc(vf.ToolsetConfig(url="http://example.invalid/mcp"))]

    class RemoteTaskset(vf.Taskset[Remote]):
        def load(self):
            return [Remote(QAData(prompt="p", answer="a"))]

    with pytest.raises(ConfigError, match=r"remote server.*in process"):
        TasksetEnv(RemoteTaskset())
    with pytest.raises(ValueError, match="plugged judges"):
        vf.TaskConfig(judges=[{"id": "reference"}])


def test_env_rows_and_tool_schemas():
    env = TasksetEnv(CalcTaskset())
    names = sorted(t["function"]["name"] for t in env.oai_tools)
    assert names == ["calc_add", "calc_mul"]
    add = next(t for t in env.oai_tools if t["function"]["name"] == "calc_add")["function"]
    assert add["description"] == "Add two integers." and set(add["parameters"]["properties"]) == {"a", "b"}
    rows = env.eval_dataset.rows
    assert [r["prompt"] for r in rows] == [
        [{"role": "user", "content": "hi 0"}],
        [{"role": "user", "content": "hi 1"}],
    ]
    assert env.rubric.get_reward_func_names() == []
