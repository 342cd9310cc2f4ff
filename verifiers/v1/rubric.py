"""`TasksetRubric`: a v1 task's ``@vf.reward``/``@vf.metric`` hooks as our rubric.

Hook names are only known once a hook has run (a hook returning a mapping names its own
scores), so this rubric scores the whole trace at once instead of calling one function per
name: the reward is upstream's ``trace.reward`` (Σ score·weight) and every reward and metric
becomes one of our metrics, by name. A failing hook is an error of that hook only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from verifiers.rubrics.rubric import Rubric
from verifiers.types import RolloutError, RolloutScore
from verifiers.v1.task import Task
from verifiers.v1.trace import Trace


class TasksetRubric(Rubric):
    def __init__(self, task: Task, sync_trace: Callable[[dict[str, Any]], Trace]) -> None:
        """`task`: one task of the taskset (for the declared hook names); `sync_trace`: brings a
        rollout's trace up to date with the core's state (the environment's)."""
        super().__init__()
        self.task = task
        self.sync_trace = sync_trace

    def get_reward_func_names(self) -> list[str]:
        """The declared hook names (a mapping-returning hook reports its keys only when scored)."""
        return [fn.__name__ for kind in ("reward", "metric") for fn in self.task.hooks(kind)]

    async def score_rollout(
        self,
        prompt: Any = None,
        completion: Any = None,
        answer: Any = "",
        state: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> RolloutScore:
        rollout = (state or {}).get("v1")
        if rollout is None:
            return RolloutScore()  # the rollout failed before its task was set up: nothing to score
        trace = self.sync_trace(state)  # type: ignore[arg-type]
        if trace.errors:
            return RolloutScore()  # as upstream: an errored trace is not scored (its error is the rollout's)
        failures = await rollout.task.score(trace)
        out = RolloutScore(reward=trace.reward)
        for name, reward in trace.rewards.items():
            out.metrics[name] = reward.score if reward is not None else 0.0
        for name, value in trace.metrics.items():
            if name in trace.rewards:
                self.logger.warning(
                    "metric %r has the name of a reward; the metric's value is reported", name
                )
            out.metrics[name] = value if value is not None else 0.0
        out.errors = [RolloutError.from_exception(exc, where=where) for where, exc in failures]
        return out
