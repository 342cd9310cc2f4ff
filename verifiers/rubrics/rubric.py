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

import asyncio
import inspect
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from verifiers._helpers import callable_name, maybe_await, set_legacy_attributes
from verifiers.errors import ConfigError, RubricError
from verifiers.parsers.parser import Parser
from verifiers.types import RolloutError, RolloutScore, RolloutScores

logger = logging.getLogger(__name__)

RewardFunc = Callable[..., Any]

_PLURAL = {"prompts", "completions", "answers", "states", "tasks", "infos", "example_ids"}


def group_reward(fn: RewardFunc) -> RewardFunc:
    """Mark ``fn`` as a group reward function (it receives lists, returns a list of floats)."""
    fn.__vf_group__ = True  # type: ignore[attr-defined]
    return fn


@dataclass(slots=True, frozen=True)
class _Sig:
    """What a reward function asks for, read once per function object."""

    name: str
    params: frozenset[str]
    required: frozenset[str]
    var_kw: bool
    is_group: bool
    is_async: bool = False

    @classmethod
    def of(cls, fn: RewardFunc) -> _Sig:
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
        is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)
        return cls(callable_name(fn), frozenset(params), frozenset(required), var_kw, is_group, is_async)

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
    if isinstance(value, str | bytes | bytearray):  # float("0.5") would pass a parsing bug off as a score
        raise RubricError(
            f"reward function {name!r} returned the string {value!r}, not a number; "
            "return a float (convert it in the function if the text is meant as a number)"
        )
    try:
        score = float(value)
    except (TypeError, ValueError) as exc:
        raise RubricError(f"reward function {name!r} returned {value!r}, not a number") from exc
    if not math.isfinite(score):
        raise RubricError(f"reward function {name!r} returned {score}, not a finite number")
    return score


def _adds_finitely(score: RolloutScore, name: str, weight: float, value: float) -> bool:
    """Add ``weight * value`` to the reward, or record a scoring error if that is not finite.

    Each score is finite, but a huge one times its weight, or the sum, can overflow to inf,
    which the trainer would turn into NaN advantages. Like any failing reward function, the
    function then scores 0 and the rollout carries the error.
    """
    total = score.reward + weight * value
    if math.isfinite(total):
        score.reward = total
        return True
    exc = RubricError(
        f"reward function {name!r} returned {value} with weight {weight}, which makes the reward {total}, "
        "not a finite number; scale the score or its weight down"
    )
    score.errors.append(RolloutError.from_exception(exc, where=f"reward:{name}"))
    return False


class Rubric:
    """Weighted reward functions. ``reward = Σ weight·score``; every function is also a metric.

    ``reward_funcs`` and ``reward_weights`` are plain, public lists, read at scoring
    time: 0.1.x environments append to them, replace them and set weights by index
    after construction. Weights pair with functions by position; a function without
    a weight (a shorter weight list) is reported as a metric but adds nothing to the
    reward, and an empty weight list means weight 1 for every function (both as in
    0.1.x). Two functions may share a name; the later one's score is the metric.

    Extra keyword arguments are named objects handed to reward functions that ask
    for them by name (e.g. ``Rubric(funcs=[f], tokenizer=tok)`` → ``def f(completion, tokenizer)``);
    as in 0.1.x they are also set as attributes of the rubric, unless that would
    shadow one of the rubric's own attributes or methods (then a warning is logged).
    """

    def __init__(
        self,
        funcs: Sequence[RewardFunc] | None = None,
        weights: Sequence[float] | None = None,
        parser: Parser | None = None,
        parallelize_scoring: bool = True,
        **class_objects: Any,
    ) -> None:
        self._sigs: dict[Any, _Sig] = {}
        # 0.1.x rubrics had ``self.logger`` and their subclasses log through it
        self.logger = logging.getLogger(f"verifiers.rubrics.{type(self).__name__}")
        self.reward_funcs: list[RewardFunc] = list(funcs or [])
        self.reward_weights: list[float] = [float(w) for w in weights] if weights else []
        if not self.reward_weights:
            self.reward_weights = [1.0] * len(self.reward_funcs)
        for f in self.reward_funcs:
            self._sig(f)  # a function that cannot be called is a construction error, not a zero later
        self.parser = parser if parser is not None else Parser()
        self.parallelize_scoring = parallelize_scoring
        self.class_objects: dict[str, Any] = {**class_objects, "parser": self.parser}
        set_legacy_attributes(self, class_objects)

    def _sig(self, fn: RewardFunc) -> _Sig:
        try:
            sig = self._sigs.get(fn)
        except TypeError:  # unhashable callable
            return _Sig.of(fn)
        if sig is None:
            sig = self._sigs[fn] = _Sig.of(fn)
        return sig

    def _weighted(self) -> list[tuple[RewardFunc, _Sig, float | None]]:
        """The live lists, paired by position (``None``: no weight given, metric only)."""
        funcs, weights = self.reward_funcs, self.reward_weights
        if len(weights) != len(funcs) and not getattr(self, "_warned_weights", False):
            self._warned_weights = True
            logger.warning(
                "%s has %d reward functions and %d weights; weights pair with functions by position, "
                "functions without one count as metrics only",
                type(self).__name__,
                len(funcs),
                len(weights),
            )
        return [(f, self._sig(f), float(weights[i]) if i < len(weights) else None) for i, f in enumerate(funcs)]

    # -- registration ---------------------------------------------------------------------
    def add_reward_func(self, func: RewardFunc, weight: float = 1.0) -> None:
        self._sig(func)
        self.reward_funcs.append(func)
        self.reward_weights.append(float(weight))

    def add_metric(self, func: RewardFunc, weight: float = 0.0) -> None:
        self.add_reward_func(func, weight)

    def add_class_object(self, name: str, obj: Any) -> None:
        self.class_objects[name] = obj

    def get_reward_funcs(self) -> list[RewardFunc]:
        return self.reward_funcs

    def get_reward_weights(self) -> list[float]:
        return self.reward_weights

    def get_reward_func_names(self) -> list[str]:
        return [callable_name(f) for f in self.reward_funcs]

    @property
    def has_group_funcs(self) -> bool:
        return any(self._sig(f).is_group for f in self.reward_funcs)

    # -- scoring ----------------------------------------------------------------------------
    async def call_reward_func(
        self,
        func: RewardFunc,
        prompt: Any,
        completion: Any,
        answer: Any = "",
        state: dict[str, Any] | None = None,
        task: str = "default",
        info: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> float:
        """Call one reward function with the arguments it asks for (0.1.x entry point).

        As in 0.1.x, a function that fails (raises, misses an argument, returns no
        number) scores 0.0 and the error is logged: custom ``score_rollout`` overrides
        built on this method keep 0.1.x's scores. `score_rollout` also records it.

        A function with ``**kwargs`` receives exactly what 0.1.5's did: prompt, completion,
        answer, state, task, info, the rubric's objects (``parser``, ...) and the keywords
        given here, which override the others (no ``example_id``: 0.1.x tests count them).
        """
        available: dict[str, Any] = {
            "prompt": prompt,
            "completion": completion,
            "answer": answer,
            "state": state,
            "task": task,
            "info": info or {},
            **self.class_objects,
            **kwargs,
        }
        sig = self._sig(func)
        try:
            return _as_score(sig.name, await maybe_await(func(**sig.select(available))))
        except Exception as exc:
            logger.error("Error calling reward function %s: %s: %s", sig.name, type(exc).__name__, exc)
            return 0.0

    def _available(
        self,
        prompt: Any,
        completion: Any,
        answer: Any,
        state: dict[str, Any] | None,
        task: str,
        info: dict[str, Any] | None,
        example_id: int | None,
        kwargs: dict[str, Any],
    ) -> dict[str, Any]:
        return {
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
        available = self._available(prompt, completion, answer, state, task, info, example_id, kwargs)
        funcs = [(f, s, w) for f, s, w in self._weighted() if not s.is_group]

        async def one(fn: RewardFunc, sig: _Sig) -> float | RolloutError:
            try:
                return _as_score(sig.name, await maybe_await(fn(**sig.select(available))))
            except Exception as exc:
                return RolloutError.from_exception(exc, where=f"reward:{sig.name}")

        # Concurrently only where it can overlap: a task per plain function costs more than the function
        if self.parallelize_scoring and sum(s.is_async for _, s, _ in funcs) > 1:
            values = await asyncio.gather(*(one(f, s) for f, s, _ in funcs))
        else:
            values = [await one(f, s) for f, s, _ in funcs]
        out = RolloutScore()
        for (_, sig, weight), value in zip(funcs, values, strict=True):
            if isinstance(value, RolloutError):
                out.errors.append(value)
                value = 0.0
            if weight is not None and not _adds_finitely(out, sig.name, weight, value):
                value = 0.0
            out.metrics[sig.name] = value
        return out

    async def score_group(self, rollouts: Sequence[dict[str, Any]], scores: list[RolloutScore]) -> None:
        """Run group functions over one group and add their results into ``scores`` in place.

        ``rollouts`` holds, per rollout, the singular arguments (prompt, completion, ...).
        """
        funcs = [(f, s, w) for f, s, w in self._weighted() if s.is_group]
        if not funcs or not rollouts:
            return
        available: dict[str, Any] = dict(self.class_objects)
        for key in ("prompt", "completion", "answer", "state", "task", "info", "example_id"):
            available[key + "s"] = [r.get(key) for r in rollouts]
        for fn, sig, weight in funcs:
            try:
                values = await maybe_await(fn(**sig.select(available)))
                if len(values) != len(rollouts):
                    raise RubricError(
                        f"group reward function {sig.name!r} returned {len(values)} scores for {len(rollouts)} rollouts"
                    )
                group_scores = [_as_score(sig.name, v) for v in values]
            except Exception as exc:
                group_scores = [0.0] * len(rollouts)
                err = RolloutError.from_exception(exc, where=f"reward:{sig.name}")
                for s in scores:
                    s.errors.append(err)
            for s, v in zip(scores, group_scores, strict=True):
                if weight is not None and not _adds_finitely(s, sig.name, weight, v):
                    v = 0.0
                s.metrics[sig.name] = v

    async def score_rollouts(
        self,
        prompts: Sequence[Any],
        completions: Sequence[Any],
        answers: Sequence[Any],
        states: Sequence[dict[str, Any]],
        tasks: Sequence[str] | None = None,
        infos: Sequence[dict[str, Any]] | None = None,
        max_concurrent: int = -1,
        **kwargs: Any,
    ) -> RolloutScores:
        """Score a batch (0.1.x entry point): ``RolloutScores`` with ``.reward`` and ``.metrics`` columns.

        Per-rollout functions run concurrently (bounded by ``max_concurrent``); group
        functions see the whole batch as one group. ``apply_weights`` (0.1.x) is accepted
        and ignored: rewards are always weighted.
        """
        kwargs.pop("apply_weights", None)
        n = len(prompts)
        if n == 0:  # 0.1.x: no rollouts, every metric an empty column (whatever else was passed)
            return RolloutScores(reward=[], metrics={name: [] for name in dict.fromkeys(self.get_reward_func_names())})
        tasks = list(tasks) if tasks is not None else ["default"] * n
        infos = list(infos) if infos is not None else [{} for _ in range(n)]
        lengths = {
            "prompts": n, "completions": len(completions), "answers": len(answers), "states": len(states),
            "tasks": len(tasks), "infos": len(infos),
        }  # fmt: skip
        if len(set(lengths.values())) > 1:
            raise ConfigError(f"score_rollouts needs one entry per rollout in every column; got {lengths}")
        rows = [
            {"prompt": p, "completion": c, "answer": a, "state": s, "task": t, "info": i}
            for p, c, a, s, t, i in zip(prompts, completions, answers, states, tasks, infos, strict=True)
        ]
        sem = asyncio.Semaphore(max_concurrent) if max_concurrent and max_concurrent > 0 else None

        async def one(row: dict[str, Any]) -> RolloutScore:
            if sem is None:
                return await self.score_rollout(**row, **kwargs)
            async with sem:
                return await self.score_rollout(**row, **kwargs)

        scores = list(await asyncio.gather(*(one(r) for r in rows)))
        await self.score_group(rows, scores)
        names = self.get_reward_func_names()
        for s in scores:
            names.extend(k for k in s.metrics if k not in names)
        return RolloutScores(
            reward=[s.reward for s in scores],
            metrics={k: [s.metrics.get(k, 0.0) for s in scores] for k in dict.fromkeys(names)},
        )


class EmptyRubricGroupError(ConfigError, AssertionError):
    """A `RubricGroup` without rubrics. 0.1.5 raised ``ValueError`` from the constructor and
    ``AssertionError`` from ``add_reward_func`` with the same words; this is both."""


_NO_RUBRICS = "RubricGroup must have at least one rubric: pass rubrics=[Rubric(...), ...]"


class RubricGroup(Rubric):
    """Several rubrics scored together: rewards add up, metrics are merged (summed on equal names, as in 0.1.x).

    ``reward_funcs``/``reward_weights`` are read-only concatenations of the members'
    lists; change a member rubric's lists instead.
    """

    def __init__(self, rubrics: Sequence[Rubric], **kwargs: Any) -> None:
        if not rubrics:
            raise EmptyRubricGroupError(_NO_RUBRICS)
        self.rubrics = list(rubrics)
        super().__init__(parser=kwargs.pop("parser", None) or rubrics[0].parser, **kwargs)

    @property  # type: ignore[override]
    def reward_funcs(self) -> list[RewardFunc]:
        return [f for r in self.rubrics for f in r.reward_funcs]

    @reward_funcs.setter
    def reward_funcs(self, value: list[RewardFunc]) -> None:
        if value:
            raise ConfigError("set reward functions on the member rubrics of a RubricGroup")

    @property  # type: ignore[override]
    def reward_weights(self) -> list[float]:
        return [w for r in self.rubrics for w in r.reward_weights]

    @reward_weights.setter
    def reward_weights(self, value: list[float]) -> None:
        if value:
            raise ConfigError("set reward weights on the member rubrics of a RubricGroup")

    def add_reward_func(self, func: RewardFunc, weight: float = 1.0) -> None:
        if not getattr(self, "rubrics", None):  # only reachable by bypassing __init__ (0.1.x tests do)
            raise EmptyRubricGroupError(_NO_RUBRICS)
        logger.warning("RubricGroup.add_reward_func adds the function to the first rubric of the group")
        self.rubrics[0].add_reward_func(func, weight)

    def get_reward_func_names(self) -> list[str]:
        return [n for r in self.rubrics for n in r.get_reward_func_names()]

    @property
    def has_group_funcs(self) -> bool:
        return any(r.has_group_funcs for r in self.rubrics)

    async def score_rollout(self, *args: Any, **kwargs: Any) -> RolloutScore:
        out = RolloutScore()
        for r in self.rubrics:
            s = await r.score_rollout(*args, **kwargs)
            out.reward += s.reward
            for k, v in s.metrics.items():
                out.metrics[k] = out.metrics.get(k, 0.0) + v
            out.errors.extend(s.errors)
        return out

    async def score_group(self, rollouts: Sequence[dict[str, Any]], scores: list[RolloutScore]) -> None:
        for r in self.rubrics:
            await r.score_group(rollouts, scores)
