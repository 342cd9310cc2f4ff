"""A v1 `Taskset` as one of our `Environment`s: the ``null`` harness run in process.

`TasksetEnv` is our tool-using turn loop (`MultiTurnEnv`): each task becomes a dataset row,
each rollout gets a `Trace`, fresh instances of the task's toolsets (set up with
``setup()``/``setup_task(task)``) and the taskset's shared ones, whose ``@vf.tool`` methods are
the model's tools. ``@vf.stop`` hooks are checked before and after every model turn; the task's
``@vf.reward``/``@vf.metric`` hooks score the trace through `TasksetRubric`. So vf-eval, its
concurrency and saved results, and the trainer work on a taskset as on any environment.

Only what runs in this process is supported: the ``null`` harness and local (``subprocess``)
runtimes. Anything else raises a `ConfigError` naming the local alternative.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from verifiers.envs.multiturn_env import MultiTurnEnv
from verifiers.errors import ConfigError, EnvError, ToolError
from verifiers.tools.execution import call_tool, default_error_formatter, format_tool_result, parse_tool_call
from verifiers.tools.schema import tool_schema
from verifiers.types import Message, Messages, State
from verifiers.v1.configs import AgentOptions, ToolsetConfig
from verifiers.v1.decorators import call
from verifiers.v1.messages import from_dict
from verifiers.v1.rubric import TasksetRubric
from verifiers.v1.task import Task
from verifiers.v1.taskset import Taskset
from verifiers.v1.toolset import Toolset, bind_state, unbind_state
from verifiers.v1.trace import ModelCall, Trace, TraceTask

TASK_IDX_KEY = "v1_task_idx"
CLOUD_RUNTIMES = {"prime": "Prime Intellect", "modal": "Modal", "e2b": "E2B"}
CONTAINER_RUNTIMES = ("docker", "podman", "apptainer")


def check_runtime(runtime: Any, what: str) -> None:
    kind = getattr(runtime, "type", "subprocess")
    if kind == "subprocess":
        return
    if kind in CLOUD_RUNTIMES:
        raise ConfigError(
            f"{what} asks for the {kind!r} runtime, which needs a {CLOUD_RUNTIMES[kind]} account; this "
            "adapter runs everything in process: use runtime={'type': 'subprocess'}"
        )
    where = "a container runtime" if kind in CONTAINER_RUNTIMES else f"the {kind!r} runtime"
    raise ConfigError(
        f"{what} asks for {where}, which is not supported here; use runtime={{'type': 'subprocess'}}"
    )


def check_toolset(toolset: Toolset) -> None:
    config = getattr(toolset, "config", None)
    name = type(toolset).__name__
    if isinstance(config, ToolsetConfig) or hasattr(config, "url"):
        if getattr(config, "url", None):
            raise ConfigError(
                f"toolset {name} points at a remote server ({config.url}); remote tool servers are not "  # type: ignore[union-attr]
                "reached here: unset url to run its @vf.tool methods in process"
            )
        check_runtime(getattr(config, "runtime", None), f"toolset {name}")


def taskset_tasks(taskset: Taskset, agent: AgentOptions) -> list[Task]:
    """The tasks of a bounded taskset that runs here (local runtime, no container), or a `ConfigError`."""
    check_runtime(agent.runtime, "the agent")
    if taskset.INFINITE:
        raise ConfigError(f"{type(taskset).__name__} is infinite; bound it (taskset.take(n)) before wrapping it")
    tasks = list(taskset)
    if not tasks:
        raise ConfigError(f"{type(taskset).__name__}.load() yielded no tasks")
    needs_box = [t.data.idx for t in tasks if t.NEEDS_CONTAINER or t.data.image]
    if needs_box:
        raise ConfigError(
            f"tasks {needs_box[:5]} need a container (NEEDS_CONTAINER or an image), which runs nowhere here; "
            "run them with upstream verifiers and a container runtime"
        )
    return tasks


def task_row(task: Task) -> dict[str, Any]:
    """The dataset row of one task: chat prompt (system prompt first), ids in ``info``."""
    data = task.data
    if data.prompt is None:
        raise ConfigError(
            f"task {data.idx} has no prompt (the user opens the conversation); the null harness needs a prompt"
        )
    prompt: list[Message] = [{"role": "system", "content": data.system_prompt}] if data.system_prompt else []
    if isinstance(data.prompt, str):
        prompt.append({"role": "user", "content": data.prompt})
    else:
        prompt.extend(m.model_dump(exclude_none=True) for m in data.prompt)
    info = {TASK_IDX_KEY: data.idx, "task_key": task.key}
    info.update({k: v for k, v in (("task_id", data.id), ("task_name", data.name)) if v is not None})
    return {"prompt": prompt, "answer": "", "info": info, "example_id": data.idx}


@dataclass
class Rollout:
    """What one rollout holds beyond the core's state dict."""

    task: Task
    trace: Trace
    tools: dict[str, tuple[Callable[..., Any], Toolset]] = field(default_factory=dict)


def gather_tools(
    toolsets: list[Toolset], disabled: list[str] | None
) -> dict[str, tuple[Callable[..., Any], Toolset]]:
    tools: dict[str, tuple[Callable[..., Any], Toolset]] = {}
    for toolset in toolsets:
        for name, fn in toolset.tools().items():
            if name in tools:
                raise ConfigError(
                    f"two toolsets advertise the tool {name!r}; give one a distinct TOOL_PREFIX"
                )
            if not disabled or name not in disabled:
                tools[name] = (fn, toolset)
    return tools


def schemas(tools: dict[str, tuple[Callable[..., Any], Toolset]]) -> list[dict[str, Any]]:
    out = []
    for name, (fn, _) in tools.items():
        schema = tool_schema(fn)
        schema["function"]["name"] = name
        out.append(schema)
    return out


class TasksetEnv(MultiTurnEnv):
    """Run a v1 taskset with the in-process null harness (see the module docstring)."""

    def __init__(self, taskset: Taskset, agent: AgentOptions | None = None, **kwargs: Any) -> None:
        self.agent = agent if agent is not None else AgentOptions()
        if self.agent.harness.id != "null":
            raise ConfigError(
                f"harness {self.agent.harness.id!r} runs an agent program, which TasksetEnv (the in-process "
                "chat loop) does not; build it with vf.load_environment (verifiers.v1.program_env runs "
                "local programs) or use agent={'harness': 'null'}"
            )
        self.taskset = taskset
        tasks = taskset_tasks(taskset, self.agent)
        self.tasks = {t.data.idx: t for t in tasks}
        self.finished_traces: dict[tuple[int, int], Trace] | None = None
        """Set to a dict to keep each scored rollout's trace by (example_id, rollout_index): vf-eval's
        v1 dialect writes them as traces.jsonl (`verifiers.v1.traces`). None keeps nothing."""
        self.shared_toolsets = type(taskset).toolsets(taskset.config)
        self._shared_ready: asyncio.Task | None = None
        probe = gather_tools(
            [*self._task_toolsets(tasks[0]), *self.shared_toolsets], self.agent.harness.disabled_tools
        )
        rows = [task_row(t) for t in tasks]
        kwargs.setdefault("env_id", taskset.config.id or None)
        super().__init__(
            dataset=rows,
            eval_dataset=rows,
            rubric=TasksetRubric(tasks[0], self.sync_trace),
            oai_tools=schemas(probe) or None,
            max_turns=self.agent.max_turns or -1,
            **kwargs,
        )

    def _task_toolsets(self, task: Task) -> list[Toolset]:
        toolsets = type(task).toolsets(task.config)
        for toolset in toolsets:
            check_toolset(toolset)
        return toolsets

    async def _setup_shared(self) -> None:
        """Set the taskset's shared toolsets up once, whichever rollout comes first."""
        if self._shared_ready is None:
            for toolset in self.shared_toolsets:
                check_toolset(toolset)

            async def setup_all() -> None:
                for toolset in self.shared_toolsets:
                    await toolset.setup()

            self._shared_ready = asyncio.ensure_future(setup_all())
        await asyncio.shield(self._shared_ready)

    # -- rollout ---------------------------------------------------------------------------
    async def setup_state(self, state: State, **kwargs: Any) -> State:
        idx = (state.get("info") or {}).get(TASK_IDX_KEY)
        task = self.tasks.get(idx)
        if task is None:
            raise EnvError(f"row has no task of this taskset (info[{TASK_IDX_KEY!r}] = {idx!r})")
        trace = Trace(
            task=TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
            state=type(task).state_type()(),
            prompt_messages=[from_dict(m) for m in state["prompt"]],
            tools=list(self.oai_tools or []),
        )
        rollout = state["v1"] = Rollout(task=task, trace=trace)
        await self._setup_shared()
        own = self._task_toolsets(task)
        for toolset in own:
            await toolset.setup()
            await toolset.setup_task(task)
        rollout.tools = gather_tools([*own, *self.shared_toolsets], self.agent.harness.disabled_tools)
        await task.setup(trace, None)
        return state

    async def release_state(self, state: State) -> None:
        """Called once the rollout is scored: keep its trace when asked to (`finished_traces`)."""
        if self.finished_traces is not None and "v1" in state:
            key = (int(state.get("example_id", 0)), int(state.get("rollout_index", 0)))
            self.finished_traces[key] = self.sync_trace(state)

    def sync_trace(self, state: State) -> Trace:
        """Bring the trace up to date with the core's state (completion, model calls)."""
        trace: Trace = state["v1"].trace
        completion = state.get("completion") or []
        if len(trace.completion_messages) != len(completion):
            done = len(trace.completion_messages)
            trace.completion_messages.extend(from_dict(m) for m in completion[done:])
        responses = state.get("responses") or []
        for response in responses[len(trace.calls) :]:
            usage = getattr(response, "usage", None)
            trace.calls.append(
                ModelCall(
                    finish_reason=getattr(response, "finish_reason", None),
                    prompt_tokens=getattr(usage, "prompt_tokens", 0) or 0,
                    completion_tokens=getattr(usage, "completion_tokens", 0) or 0,
                )
            )
        return trace

    async def is_completed(self, messages: Messages, state: State, **kwargs: Any) -> bool:
        if "v1" not in state:
            return await super().is_completed(messages, state, **kwargs)
        trace = self.sync_trace(state)
        task: Task = state["v1"].task
        available = {"trace": trace, Trace: trace, "task": task.data, "state": trace.state}
        for fn in task.hooks("stop"):
            fired = await call(fn, available)
            if not isinstance(fired, bool):
                raise EnvError(f"@stop {fn.__name__} must return bool, got {type(fired).__name__}")
            if fired:
                trace.stop(fn.__name__)
                return True
        if await super().is_completed(messages, state, **kwargs):
            trace.stop("max_turns" if self.max_turns > 0 and state["turn"] >= self.max_turns else "completed")
            return True
        last = messages[-1] if isinstance(messages, list) and messages else None
        if (
            state.get("turn", 0) > 0
            and last is not None
            and last.get("role") == "assistant"
            and not last.get("tool_calls")
        ):
            trace.stop("agent_completed")
            return True
        return False

    async def env_response(self, messages: Messages, state: State, **kwargs: Any) -> list[Message]:
        rollout: Rollout = state["v1"]
        out: list[Message] = []
        for tc in messages[-1].get("tool_calls") or []:  # type: ignore[union-attr]
            call_id, name, raw = "", "", ""
            try:
                call_id, name, raw = parse_tool_call(tc)
                content = format_tool_result(await self._call(rollout, name, raw))
            except ToolError as exc:
                state.setdefault("tool_errors", []).append(str(exc))
                shown = exc.__cause__ if isinstance(exc.__cause__, Exception) else exc
                content = default_error_formatter(shown)
            out.append({"role": "tool", "content": content, "tool_call_id": call_id, "name": name})
        return out

    async def _call(self, rollout: Rollout, name: str, raw: str) -> Any:
        entry = rollout.tools.get(name)
        fns = {n: fn for n, (fn, _) in rollout.tools.items()}
        if entry is None:
            return await call_tool(fns, name, raw)  # raises ToolNotFoundError naming the tools
        token = bind_state(rollout.trace.state, entry[1])
        try:
            return await call_tool(fns, name, raw, timeout_s=self.agent.harness.tool_timeout)
        finally:
            unbind_state(token)

    async def rollout(self, *args: Any, **kwargs: Any) -> tuple[Messages, State]:
        state = kwargs.get("state")
        try:
            completion, state = await super().rollout(*args, **kwargs)
        except Exception as exc:
            if isinstance(state, dict) and "v1" in state:
                state["v1"].trace.record_error(exc)
            raise
        trace = self.sync_trace(state)
        if state.get("stop_reason") == "length":
            trace.stop("max_output_tokens")
        trace.stop("completed")
        trace.ok = not trace.errors
        await state["v1"].task.finalize(trace, None)
        return completion, state
