"""Rubric: a weighted set of reward functions that scores finished rollouts.

Reward functions are plain functions (sync or async). They declare, by
parameter name, what they need from the rollout: ``prompt``, ``completion``,
``answer``, ``state``, ``task``, ``info``, ``example_id``, ``parser`` or any
object registered on the rubric (``judge`` for `JudgeRubric`); a function with
``**kwargs`` receives everything. They return a float.

Group reward functions see the whole group of rollouts of one prompt at once
(for relative or diversity rewards). They are recognised by plural parameter
names (``prompts``, ``completions``, ``answers``, ``states``, ``tasks``,
``infos``) or the `group_reward` decorator, and return one float per rollout.

A reward function that raises, or returns something that is not a finite
number, is recorded as an error on the rollout and scores 0 for that function
only: one bad function never loses a batch.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from verifiers.errors import ConfigError, RubricError
from verifiers.parsers.parser import Parser
from verifiers.types import RolloutError, RolloutScore
from verifiers.utils import callable_name, maybe_await

RewardFunc = Callable[..., Any]

_PLURAL = {"prompts", "completions", "answers", "states", "tasks", "infos", "example_ids"}


def group_reward(fn: RewardFunc) -> RewardFunc:
    """Mark ``fn`` as a group reward function (it receives lists, returns a list of floats)."""
    fn.__vf_group__ = True  # type: ignore[attr-defined]
    return fn


@dataclass(slots=True)
class _Func:
    fn: RewardFunc
    name: str
    weight: float
    params: frozenset[str]
    required: frozenset[str]
    var_kw: bool
    is_group: bool

    @classmethod
    def wrap(cls, fn: RewardFunc, weight: float) -> _Func:
        if not callable(fn):
            raise ConfigError(f"reward function {fn!r} is not callable")
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"cannot read the signature of reward function {fn!r}: {exc}") from exc
        params, required, var_kw = set(), set(), False
        for p in sig.parameters.values():
            if p.kind is p.VAR_KEYWORD:
                var_kw = True
            elif p.kind is p.VAR_POSITIONAL:
                continue
            else:
                params.add(p.name)
                if p.default is p.empty:
                    required.add(p.name)
        is_group = bool(getattr(fn, "__vf_group__", False)) or bool(params & _PLURAL)
        return cls(fn, callable_name(fn), float(weight), frozenset(params), frozenset(required), var_kw, is_group)

    def select(self, available: dict[str, Any]) -> dict[str, Any]:
        if self.var_kw:
            return available
        missing = self.required - available.keys()
        if missing:
            raise RubricError(
                f"reward function {self.name!r} needs {sorted(missing)}, which is not available; "
                f"available arguments: {sorted(available)}"
            )
        return {k: available[k] for k in self.params if k in available}


def _as_score(name: str, value: Any) -> float:
    try:
        score = float(value)
    except (TypeError, ValueError) as exc:
        raise RubricError(f"reward function {name!r} returned {value!r}, not a number") from exc
    if not math.isfinite(score):
        raise RubricError(f"reward function {name!r} returned {score}, not a finite number")
    return score


class Rubric:
    """Weighted reward functions. ``reward = Σ weight·score``; every function is also a metric.

    Extra keyword arguments are named objects handed to reward functions that ask
    for them by name (e.g. ``Rubric(funcs=[f], tokenizer=tok)`` → ``def f(completion, tokenizer)``).
    """

    def __init__(
        self,
        funcs: Sequence[RewardFunc] | None = None,
        weights: Sequence[float] | None = None,
        parser: Parser | None = None,
        **class_objects: Any,
    ) -> None:
        funcs = list(funcs or [])
        weights = list(weights) if weights is not None else [1.0] * len(funcs)
        if len(weights) != len(funcs):
            raise ConfigError(
                f"Rubric got {len(funcs)} reward functions but {len(weights)} weights; give one weight per function"
            )
        self.parser = parser if parser is not None else Parser()
        self.class_objects: dict[str, Any] = {**class_objects, "parser": self.parser}
        self._funcs: list[_Func] = []
        for f, w in zip(funcs, weights, strict=True):
            self.add_reward_func(f, w)

    # -- registration ---------------------------------------------------------------------
    def add_reward_func(self, func: RewardFunc, weight: float = 1.0) -> None:
        wrapped = _Func.wrap(func, weight)
        if wrapped.name in self.get_reward_func_names():
            raise ConfigError(f"a reward function named {wrapped.name!r} is already on this rubric; rename one")
        self._funcs.append(wrapped)

    def add_class_object(self, name: str, obj: Any) -> None:
        self.class_objects[name] = obj

    @property
    def reward_funcs(self) -> list[RewardFunc]:
        return [f.fn for f in self._funcs]

    @property
    def reward_weights(self) -> list[float]:
        return [f.weight for f in self._funcs]

    def get_reward_funcs(self) -> list[RewardFunc]:
        return self.reward_funcs

    def get_reward_weights(self) -> list[float]:
        return self.reward_weights

    def get_reward_func_names(self) -> list[str]:
        return [f.name for f in self._funcs]

    @property
    def has_group_funcs(self) -> bool:
        return any(f.is_group for f in self._funcs)

    # -- scoring ----------------------------------------------------------------------------
    async def score_rollout(
        self,
        prompt: Any,
        completion: Any,
        answer: Any = "",
        state: dict[str, Any] | None = None,
        task: str = "default",
        info: dict[str, Any] | None = None,
        example_id: int | None = None,
        **kwargs: Any,
    ) -> RolloutScore:
        """Score one rollout with the per-rollout functions (group functions are skipped here)."""
        available = {
            **self.class_objects,
            **kwargs,
            "prompt": prompt,
            "completion": completion,
            "answer": answer,
            "state": state if state is not None else {},
            "task": task,
            "info": info if info is not None else {},
            "example_id": example_id,
        }
        out = RolloutScore()
        for f in self._funcs:
            if f.is_group:
                continue
            try:
                score = _as_score(f.name, await maybe_await(f.fn(**f.select(available))))
            except Exception as exc:
                score = 0.0
                out.errors.append(RolloutError.from_exception(exc, where=f"reward:{f.name}"))
            out.metrics[f.name] = score
            out.reward += f.weight * score
        return out

    async def score_group(self, rollouts: Sequence[dict[str, Any]], scores: list[RolloutScore]) -> None:
        """Run group functions over one group and add their results into ``scores`` in place.

        ``rollouts`` holds, per rollout, the singular arguments (prompt, completion, ...).
        """
        if not self.has_group_funcs or not rollouts:
            return
        available: dict[str, Any] = dict(self.class_objects)
        for key in ("prompt", "completion", "answer", "state", "task", "info", "example_id"):
            available[key + "s"] = [r.get(key) for r in rollouts]
        for f in self._funcs:
            if not f.is_group:
                continue
            try:
                values = await maybe_await(f.fn(**f.select(available)))
                if len(values) != len(rollouts):
                    raise RubricError(
                        f"group reward function {f.name!r} returned {len(values)} scores for {len(rollouts)} rollouts"
                    )
                group_scores = [_as_score(f.name, v) for v in values]
            except Exception as exc:
                group_scores = [0.0] * len(rollouts)
                err = RolloutError.from_exception(exc, where=f"reward:{f.name}")
                for s in scores:
                    s.errors.append(err)
            for s, v in zip(scores, group_scores, strict=True):
                s.metrics[f.name] = v
                s.reward += f.weight * v

    async def score_rollouts(
        self,
        prompts: Sequence[Any],
        completions: Sequence[Any],
        answers: Sequence[Any],
        states: Sequence[dict[str, Any]],
        tasks: Sequence[str] | None = None,
        infos: Sequence[dict[str, Any]] | None = None,
        **kwargs: Any,
    ) -> list[RolloutScore]:
        """Score a batch treated as ONE group (0.1.x entry point; the engine scores group by group)."""
        n = len(prompts)
        tasks = list(tasks) if tasks is not None else ["default"] * n
        infos = list(infos) if infos is not None else [{} for _ in range(n)]
        rows = [
            {"prompt": p, "completion": c, "answer": a, "state": s, "task": t, "info": i}
            for p, c, a, s, t, i in zip(prompts, completions, answers, states, tasks, infos, strict=True)
        ]
        scores = [await self.score_rollout(**row, **kwargs) for row in rows]
        await self.score_group(rows, scores)
        return scores


class RubricGroup(Rubric):
    """Several rubrics scored together: rewards add up, metrics are merged."""

    def __init__(self, rubrics: Sequence[Rubric], **kwargs: Any) -> None:
        if not rubrics:
            raise ConfigError("RubricGroup needs at least one rubric")
        super().__init__(parser=rubrics[0].parser, **kwargs)
        self.rubrics = list(rubrics)

    def add_reward_func(self, func: RewardFunc, weight: float = 1.0) -> None:
        if not hasattr(self, "rubrics"):
            super().add_reward_func(func, weight)
            return
        self.rubrics[0].add_reward_func(func, weight)

    def get_reward_func_names(self) -> list[str]:
        if not hasattr(self, "rubrics"):
            return super().get_reward_func_names()
        return [n for r in self.rubrics for n in r.get_reward_func_names()]

    @property
    def reward_funcs(self) -> list[RewardFunc]:
        return [f for r in self.rubrics for f in r.reward_funcs]

    @property
    def reward_weights(self) -> list[float]:
        return [w for r in self.rubrics for w in r.reward_weights]

    @property
    def has_group_funcs(self) -> bool:
        return any(r.has_group_funcs for r in self.rubrics)

    async def score_rollout(self, *args: Any, **kwargs: Any) -> RolloutScore:
        out = RolloutScore()
        for r in self.rubrics:
            s = await r.score_rollout(*args, **kwargs)
            out.reward += s.reward
            out.metrics.update(s.metrics)
            out.errors.extend(s.errors)
        return out

    async def score_group(self, rollouts: Sequence[dict[str, Any]], scores: list[RolloutScore]) -> None:
        for r in self.rubrics:
            await r.score_group(rollouts, scores)
