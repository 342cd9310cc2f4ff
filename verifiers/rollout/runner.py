"""The rollout engine: the only place where concurrency lives.

One asyncio task per sample; a semaphore bounds how many are in flight
(``max_concurrent``); each does exactly one rollout (one request per model
turn, never ``n > 1``). Scoring is interleaved: a rollout is scored by the
per-rollout reward functions as soon as it finishes, and its group by the group
functions as soon as the last member finishes; ``on_group`` then receives the
finished group (that is how results are saved incrementally).

Failures are data: an exception in a rollout is recorded on its
`RolloutResult` (``error``, ``stop_reason="error"``) and touches no sibling;
a rollout that outlives ``rollout_timeout_s`` ends with ``stop_reason="timeout"``.
Cancellation (Ctrl-C) cancels every task, waits for their ``cleanup_state``
hooks, and re-raises.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from verifiers._helpers import maybe_await
from verifiers.clients.openai_client import as_chat_client
from verifiers.errors import ModelError, RolloutTimeoutError
from verifiers.rollout.inputs import RolloutInput
from verifiers.rollout.target import RolloutTarget
from verifiers.types import RolloutError, RolloutResult, RolloutScore, SamplingArgs, Timing, Usage

GroupCallback = Callable[[list[RolloutResult]], Any]
RolloutCallback = Callable[[RolloutResult], Any]


def _error_origin(exc: BaseException) -> str:
    return "model" if isinstance(exc, ModelError) else "env"


async def run_single(
    env: RolloutTarget,
    client: Any,
    model: str,
    inp: RolloutInput,
    sampling_args: SamplingArgs | None = None,
    rollout_timeout_s: float | None = None,
) -> RolloutResult:
    """Run one rollout and turn whatever happens into a `RolloutResult` (unscored)."""
    state: dict[str, Any] = {
        "example_id": inp.example_id,
        "group_id": inp.group_id,
        "rollout_index": inp.rollout_index,  # so what an env keeps of a rollout can be matched to its result
    }
    start = time.time()
    t0 = time.perf_counter()
    error: RolloutError | None = None
    stop_reason: str | None = None
    finished_completion: Any = None
    per_input = inp.extra.get("sampling_args") if inp.extra else None
    if per_input:  # e.g. a trainer's per-sample seed, so each sample is reproducible on its own
        sampling_args = {**(sampling_args or {}), **per_input}
    timeout_cm = asyncio.timeout(rollout_timeout_s)
    try:
        async with timeout_cm:
            returned_completion, returned = await env.rollout(
                client, model, inp.prompt, inp.answer, inp.task, inp.info, sampling_args, state=state
            )
        if isinstance(returned, dict) and returned is not state:
            state.update(returned)
        if isinstance(returned_completion, (list, str)):
            # what the rollout returned is its completion (a 0.1.x rollout returns a state of its own,
            # without one); state["completion"] is what a rollout that raised got to
            finished_completion = returned_completion
    except TimeoutError as exc:
        if timeout_cm.expired():
            stop_reason = "timeout"
            err: BaseException = RolloutTimeoutError(f"rollout exceeded its timeout of {rollout_timeout_s:g}s")
        else:
            stop_reason, err = "error", exc
        error = RolloutError.from_exception(err, where="rollout" if stop_reason == "timeout" else "env")
    except asyncio.CancelledError:
        await _cleanup(env, state)
        await _release(env, [RolloutResult(example_id=inp.example_id, prompt=inp.prompt, completion=[], state=state)])
        raise
    except Exception as exc:
        error = RolloutError.from_exception(exc, where=_error_origin(exc))
        stop_reason = "error"
    await _cleanup(env, state)
    gen_s = time.perf_counter() - t0
    completion = finished_completion if finished_completion is not None else state.get("completion")
    if completion is None:
        completion = "" if isinstance(inp.prompt, str) else []
    usage = state.get("usage")
    prompt = inp.prompt
    if isinstance(state.get("rollout_prompt"), (list, str)):
        prompt = state["rollout_prompt"]  # e.g. AgentEnv: the program's first call, what the model saw
    return RolloutResult(
        example_id=inp.example_id,
        group_id=inp.group_id,
        rollout_index=inp.rollout_index,
        task=inp.task,
        prompt=prompt,
        completion=completion,
        answer=inp.answer,
        info=inp.info,
        stop_reason=stop_reason or state.get("stop_reason") or "completed",  # type: ignore[arg-type]
        is_truncated=bool(state.get("is_truncated", False)) or stop_reason == "timeout",
        error=error,
        turns=int(state.get("turn", 0)),
        timing=Timing(start_time=start, generation_s=gen_s, total_s=gen_s),
        usage=usage if isinstance(usage, Usage) else Usage(),
        tokens=list(state.get("tokens") or []),
        state=state,
    )


async def _release(env: RolloutTarget, group: list[RolloutResult]) -> None:
    """``release_state`` once scoring is over: what reward functions read (an agent's working
    directory) lives until then, not only until the rollout ends."""
    release = getattr(env, "release_state", None)
    if release is None:
        return
    for r in group:
        try:
            await maybe_await(release(r.state))
        except Exception as exc:
            r.state.setdefault("cleanup_errors", []).append(RolloutError.from_exception(exc, where="cleanup"))


async def _cleanup(env: RolloutTarget, state: dict[str, Any]) -> None:
    try:
        await maybe_await(env.cleanup_state(state))
    except Exception as exc:  # a failing cleanup must not hide the rollout's own outcome
        state.setdefault("cleanup_errors", []).append(RolloutError.from_exception(exc, where="cleanup"))


def _scoring_kwargs(r: RolloutResult) -> dict[str, Any]:
    return {
        "prompt": r.prompt,
        "completion": r.completion,
        "answer": r.answer,
        "state": r.state,
        "task": r.task,
        "info": r.info,
        "example_id": r.example_id,
    }


def _apply_score(r: RolloutResult, score: RolloutScore, seconds: float) -> None:
    r.reward = score.reward
    r.metrics = score.metrics
    r.scoring_errors = score.errors
    r.timing.scoring_s += seconds
    r.timing.total_s = r.timing.generation_s + r.timing.scoring_s
    timing = r.state.get("timing")
    if isinstance(timing, dict):  # the 0.1.x view of the same figures, in milliseconds
        timing["scoring_ms"] = r.timing.scoring_s * 1000
        timing["total_ms"] = r.timing.total_s * 1000


async def run_rollouts(
    env: RolloutTarget,
    client: Any,
    model: str,
    inputs: Sequence[RolloutInput],
    *,
    sampling_args: SamplingArgs | None = None,
    max_concurrent: int = -1,
    rollout_timeout_s: float | None = None,
    score: bool = True,
    on_group: GroupCallback | None = None,
    on_rollout: RolloutCallback | None = None,
) -> list[RolloutResult]:
    """Run every input concurrently; return results in input order.

    ``max_concurrent <= 0`` means no limit. ``on_group`` (sync or async) is called
    once per finished, scored group, in completion order. ``on_rollout`` (sync or
    async) is called once per rollout as soon as it is scored by the per-rollout
    functions, before its group completes (live progress displays use it).
    """
    chat_client = as_chat_client(client)
    sem = asyncio.Semaphore(max_concurrent) if max_concurrent and max_concurrent > 0 else None
    group_sizes = Counter(inp.group_id for inp in inputs)
    pending: dict[int, list[RolloutResult]] = {}
    results: list[RolloutResult | None] = [None] * len(inputs)
    rubric = env.rubric

    async def finish_group(group: list[RolloutResult]) -> None:
        group.sort(key=lambda r: r.rollout_index)
        if score and rubric.has_group_funcs:
            t = time.perf_counter()
            scores = [RolloutScore(reward=r.reward, metrics=dict(r.metrics), errors=list(r.scoring_errors)) for r in group]
            try:
                await rubric.score_group([_scoring_kwargs(r) for r in group], scores)
            except Exception as exc:
                err = RolloutError.from_exception(exc, where="rubric")
                for s in scores:
                    s.errors.append(err)
            dt = (time.perf_counter() - t) / len(group)
            for r, s in zip(group, scores, strict=True):
                _apply_score(r, s, dt)
        await _release(env, group)
        if on_group is not None:
            await maybe_await(on_group(group))

    async def one(i: int, inp: RolloutInput) -> None:
        # Each rollout gets the client as given (0.1.x rollouts call client.chat.completions.create);
        # the turn loop adapts it with the same cached `as_chat_client` adapter as chat_client here.
        if sem is not None:
            async with sem:
                res = await run_single(env, client, model, inp, sampling_args, rollout_timeout_s)
        else:
            res = await run_single(env, client, model, inp, sampling_args, rollout_timeout_s)
        if score:
            t = time.perf_counter()
            try:
                s = await rubric.score_rollout(**_scoring_kwargs(res))
            except Exception as exc:  # a rubric-level failure is this rollout's, not the batch's
                s = RolloutScore(errors=[RolloutError.from_exception(exc, where="rubric")])
            _apply_score(res, s, time.perf_counter() - t)
        results[i] = res
        if on_rollout is not None:
            await maybe_await(on_rollout(res))
        bucket = pending.setdefault(inp.group_id, [])
        bucket.append(res)
        if len(bucket) == group_sizes[inp.group_id]:
            del pending[inp.group_id]
            await finish_group(bucket)

    tasks = [asyncio.ensure_future(one(i, inp)) for i, inp in enumerate(inputs)]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for t in tasks:
            # A task already being cancelled may be awaiting its cleanup hook: do not interrupt it twice.
            if not t.done() and not t.cancelling():
                t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    finally:
        release = getattr(chat_client, "release_loop_session", None)
        if release is not None:
            await release()
    return [r for r in results if r is not None]
