"""Scoring a finished trace with a task's ``@vf.metric`` and ``@vf.reward`` hooks.

Hooks ask for what they need by parameter name: ``trace``, ``task`` (the row, `TaskData`, as
upstream injects it), ``state`` (``trace.state``) and ``runtime``. There is no runtime in
process, so a hook that requires one is skipped, as upstream skips it when scoring offline.
A hook returning a mapping records one score per key (each reward key with the hook's weight).
Unlike upstream, one failing hook does not void the others: its names stay None on the trace
and the exception is returned, so our rubric reports it as that function's error.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from verifiers.v1.decorators import call, hook_option
from verifiers.v1.trace import Trace

logger = logging.getLogger(__name__)


def requires_runtime(fn: Callable[..., Any]) -> bool:
    param = inspect.signature(fn).parameters.get("runtime")
    return param is not None and param.default is inspect.Parameter.empty


def _number(name: str, value: Any) -> float:
    if isinstance(value, int | float):  # bool is an int
        number = float(value)
        if math.isfinite(number):
            return number
    raise TypeError(f"{name} returned {value!r}; a score must be a finite number or a mapping of them")


def _items(fn: Callable[..., Any], result: Any) -> list[tuple[str, float]]:
    if isinstance(result, Mapping):
        return [(str(k), _number(f"{fn.__name__}[{k!r}]", v)) for k, v in result.items()]
    return [(fn.__name__, _number(fn.__name__, result))]


async def _run(fns: list[Callable[..., Any]], available: dict[Any, Any]) -> list[Any]:
    async def one(fn: Callable[..., Any]) -> Any:
        try:
            return await call(fn, available)
        except Exception as exc:  # one hook's failure is its own
            return exc

    return await asyncio.gather(*(one(fn) for fn in fns))


async def score_trace(
    metrics: list[Callable[..., Any]],
    rewards: list[Callable[..., Any]],
    data: Any,
    trace: Trace,
    runtime: Any = None,
) -> list[tuple[str, BaseException]]:
    """Score `trace` in place with the task's hooks (`data` is its row, injected as ``task``);
    returns ("reward:<name>" or "metric:<name>", exception) per failed hook."""
    available: dict[Any, Any] = {"task": data, "trace": trace, "state": trace.state}
    if runtime is None:
        skipped = [fn.__name__ for fn in (*metrics, *rewards) if requires_runtime(fn)]
        if skipped:
            logger.info("no runtime in process: skipped runtime-dependent signals %s", skipped)
        metrics = [fn for fn in metrics if not requires_runtime(fn)]
        rewards = [fn for fn in rewards if not requires_runtime(fn)]
    else:
        available["runtime"] = runtime
    errors: list[tuple[str, BaseException]] = []
    for fn in metrics:
        trace.metrics[fn.__name__] = None
    for fn in rewards:
        trace.rewards[fn.__name__] = None
    for _, items in _scored("metric", metrics, await _run(metrics, available), trace.metrics, errors):
        trace.record_metrics(dict(items))
    for fn, items in _scored("reward", rewards, await _run(rewards, available), trace.rewards, errors):
        weight = float(hook_option(fn, "weight", 1.0))
        for key, value in items:
            trace.record_reward(key, value, weight)
    return errors


def _scored(
    kind: str, fns: list[Any], results: list[Any], table: dict[str, Any], errors: list[tuple[str, BaseException]]
) -> Iterator[tuple[Any, list[tuple[str, Any]]]]:
    """(hook, its named scores) for each hook that scored; a failed one goes to ``errors`` as
    ``"<kind>:<name>"``. A hook that returned a mapping drops its own name's placeholder in ``table``."""
    for fn, result in zip(fns, results, strict=True):
        try:
            items = _items(fn, result) if not isinstance(result, BaseException) else None
        except TypeError as exc:
            result = exc
        if isinstance(result, BaseException):
            errors.append((f"{kind}:{fn.__name__}", result))
            continue
        if isinstance(result, Mapping) and table.get(fn.__name__) is None:
            table.pop(fn.__name__, None)
        yield fn, list(items or [])
