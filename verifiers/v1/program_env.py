"""A v1 `Taskset` whose harness is an agent program, run locally through `AgentEnv`.

Upstream runs a harness other than ``null`` (``bash``, ``codex``, ...) as a program inside the
task's runtime, the model reached through an interception server. With the ``subprocess``
runtime that is a local process, which is what `AgentEnv` runs: a program per rollout in a fresh
working directory, its model calls answered through the gateway by whatever serves the policy
(the trainer's engine, vf-serve, vLLM) and recorded token-exactly. `TasksetProgramEnv` is that
with a taskset's tasks as rows and its hooks as the rubric: the program's conversation (the
gateway's record) becomes the `Trace` the task's ``@vf.reward``/``@vf.metric`` hooks read, so
vf-eval and vf-train work on it as on the null harness.

Harnesses run here: ``bash`` (`verifiers.v1.bash_agent`, our own program with upstream's
``bash`` and ``edit`` tools). The others, which install a vendor's agent (codex, claude-code,
...), raise a `ConfigError`. Not carried over from the null harness: a taskset's Toolsets
(the program has its own tools; upstream hands them over MCP) and ``@vf.stop`` hooks (the
program decides when it is done; ``max_turns`` bounds it).
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

from verifiers.envs.agent_env import AgentEnv
from verifiers.errors import ConfigError, EnvError
from verifiers.types import Messages, State
from verifiers.v1.configs import PROGRAMS, AgentOptions
from verifiers.v1.environment import TASK_IDX_KEY, Rollout, task_row, taskset_tasks
from verifiers.v1.messages import from_dict
from verifiers.v1.rubric import TasksetRubric
from verifiers.v1.taskset import Taskset
from verifiers.v1.trace import ModelCall, Trace, TraceTask


def program_command(agent: AgentOptions) -> list[str]:
    harness = agent.harness
    module = PROGRAMS.get(harness.id)
    if module is None:
        raise ConfigError(
            f"harness {harness.id!r} installs a vendor's agent program, which is not run here; "
            f"run here: 'null' (the in-process chat loop) or {', '.join(map(repr, PROGRAMS))} (a local program)"
        )
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None, module
    # run as a file, not with -m: the program imports the openai SDK alone, not this package
    command = [sys.executable, spec.origin, "--command-timeout", f"{harness.tool_timeout:g}"]
    if agent.max_turns:
        command += ["--max-turns", str(agent.max_turns)]
    return command if harness.edit else [*command, "--no-edit"]


class TasksetProgramEnv(AgentEnv):
    """Run a v1 taskset with a harness program through `AgentEnv` (see the module docstring)."""

    def __init__(self, taskset: Taskset, agent: AgentOptions, **kwargs: Any) -> None:
        command = program_command(agent)
        tasks = taskset_tasks(taskset, agent)
        if type(taskset).toolsets(taskset.config) or any(type(t).toolsets(t.config) for t in tasks):
            raise ConfigError(
                f"{type(taskset).__name__} gives the model Toolsets, which the {agent.harness.id!r} harness program "
                "does not reach here (upstream hands them over MCP); run it with the null harness: agent={'harness': 'null'}"
            )
        self.agent = agent
        self.taskset = taskset
        self.tasks = {t.data.idx: t for t in tasks}
        self.finished_traces: dict[tuple[int, int], Trace] | None = None
        """As `TasksetEnv.finished_traces`: a dict keeps each scored rollout's trace (vf-eval's traces.jsonl)."""
        rows = [task_row(t) for t in tasks]
        kwargs.setdefault("env_id", taskset.config.id or None)
        kwargs.setdefault("timeout_s", max(300.0, agent.harness.tool_timeout * (agent.max_turns or 8)))
        kwargs.setdefault("max_calls", agent.max_turns or 64)
        super().__init__(command, dataset=rows, eval_dataset=rows,
                         rubric=TasksetRubric(tasks[0], self.sync_trace), **kwargs)

    def sync_trace(self, state: State) -> Trace:
        """The rollout's trace with the program's conversation as the gateway recorded it."""
        trace: Trace = state["v1"].trace
        completion = state.get("completion") or []
        trace.completion_messages = [from_dict(m) for m in completion]
        calls = (state.get("agent") or {}).get("calls") or []
        if calls and calls[0].tools:
            trace.tools = list(calls[0].tools)  # the program's own (bash, edit)
        trace.calls = [ModelCall(finish_reason=c.finish_reason, error=c.error,
                                 prompt_tokens=len(c.tokens.prompt_ids) if c.tokens else 0,
                                 completion_tokens=len(c.tokens.completion_ids) if c.tokens else 0)
                       for c in calls]
        return trace

    async def release_state(self, state: State) -> None:
        """Keep the scored trace when asked to, then let AgentEnv remove the working directory."""
        if self.finished_traces is not None and "v1" in state:
            key = (int(state.get("example_id", 0)), int(state.get("rollout_index", 0)))
            self.finished_traces[key] = self.sync_trace(state)
        await super().release_state(state)

    async def rollout(self, client: Any, model: str, prompt: Messages, answer: str = "", task: str = "default",
                      info: Any = None, sampling_args: Any = None, state: State | None = None,
                      **kwargs: Any) -> tuple[Messages, State]:
        state = state if state is not None else {}
        the_task = self.tasks.get((info or {}).get(TASK_IDX_KEY))
        if the_task is None:
            raise EnvError(f"row has no task of this taskset (info[{TASK_IDX_KEY!r}] = {(info or {}).get(TASK_IDX_KEY)!r})")
        trace = Trace(task=TraceTask(type=type(the_task).__name__, data=the_task.data, key=the_task.key,
                                     hash=the_task.hash),
                      state=type(the_task).state_type()(), prompt_messages=[from_dict(m) for m in prompt])
        state["v1"] = Rollout(task=the_task, trace=trace)
        await the_task.setup(trace, None)
        try:
            completion, state = await super().rollout(client, model, prompt, answer, task, info, sampling_args,
                                                      state, **kwargs)
        except Exception as exc:
            self.sync_trace(state)
            trace.record_error(exc)
            raise
        self.sync_trace(state)
        if state.get("stop_reason") == "timeout":
            trace.is_timeout = True
            trace.stop("timeout")
        trace.stop("max_output_tokens" if state.get("is_truncated") else "agent_completed")  # unless stopped above
        trace.ok = not trace.errors
        await the_task.finalize(trace, None)
        return completion, state
