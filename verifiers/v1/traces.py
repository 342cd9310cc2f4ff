"""``traces.jsonl``: one JSON record per rollout, with upstream v1's trace field names.

Upstream's vf-eval writes a run as ``traces.jsonl`` (serialized ``Trace`` objects); tools built
for it read that file. vf-eval's v1 dialect writes it beside our ``results.jsonl`` in the saved
run, from the live `Trace` each rollout kept (`TasksetEnv.finished_traces`) joined with its
`RolloutResult` (timing, usage, errors the trace did not see, such as a timeout).

The fields we fill (upstream names; a field upstream has and we do not is left out rather
than faked):

- ``id``, ``task`` (``type``, ``data``, ``key``, ``hash``), ``agent`` (``name``; ``config``:
  the harness, runtime and max_turns it ran with), ``tools`` (the schemas offered);
- ``messages``: prompt and completion in order (upstream keeps a message graph, ``nodes``;
  a null-harness rollout is one linear branch, so the list is the whole of it);
- ``calls``: per model call ``model``, ``finish_reason``, ``usage`` (prompt/completion tokens);
- ``rewards`` (name → ``{score, weight}``, None when it did not score), ``metrics``, ``info``;
- ``is_completed``, ``ok``, ``stop_condition``, ``is_timeout``, ``errors`` (``type``,
  ``message``, ``traceback`` when known);
- ``timing``: ``start`` (epoch seconds), ``agent`` and ``scoring`` spans (``start``/``end``);
- upstream's computed values ``reward``, ``is_truncated``, ``num_turns``,
  ``num_input_tokens``, ``num_output_tokens``, ``num_total_tokens``;
- ours, to join a record to its ``results.jsonl`` line: ``example_id``, ``rollout_index``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from verifiers.types import RolloutResult
from verifiers.v1.trace import Trace

TRACES_FILE = "traces.jsonl"


def _dump(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    return dump(mode="json", exclude_none=True) if dump is not None else value


def _errors(trace: Trace | None, result: RolloutResult) -> list[dict[str, Any]]:
    """The trace's errors, then those only our runner saw (a timeout, a failing hook)."""
    errors = [e.model_dump(mode="json", exclude_none=True) for e in (trace.errors if trace else [])]
    seen = {(e["type"], e["message"]) for e in errors}
    for err in [result.error, *result.scoring_errors]:
        if err is not None and (err.type, err.message) not in seen:
            errors.append({"type": err.type, "message": err.message})
    return errors


def _timing(result: RolloutResult) -> dict[str, Any]:
    start = result.timing.start_time
    agent_end = start + result.timing.generation_s
    return {
        "start": start,
        "agent": {"start": start, "end": agent_end},
        "scoring": {"start": agent_end, "end": agent_end + result.timing.scoring_s},
    }


def trace_record(
    result: RolloutResult, trace: Trace | None, model: str, agent: dict[str, Any]
) -> dict[str, Any]:
    """The traces.jsonl record of one rollout (see the module docstring for the fields)."""
    errors = _errors(trace, result)
    calls = [
        {
            "model": call.model or model,
            "finish_reason": call.finish_reason,
            "usage": {"prompt_tokens": call.prompt_tokens, "completion_tokens": call.completion_tokens},
        }
        for call in (trace.calls if trace else [])
    ]
    output_tokens = sum(c["usage"]["completion_tokens"] for c in calls) or result.usage.completion_tokens
    input_tokens = calls[-1]["usage"]["prompt_tokens"] if calls else result.usage.prompt_tokens
    record: dict[str, Any] = {
        "id": trace.id if trace else None,
        "example_id": result.example_id,
        "rollout_index": result.rollout_index,
        "task": _task(trace, result),
        "agent": {"name": "agent", "config": agent},
        "tools": trace.tools if trace else [],
        "messages": [_dump(m) for m in trace.messages]
        if trace
        else [*_list(result.prompt), *_list(result.completion)],
        "calls": calls,
        "rewards": {k: _dump(v) for k, v in trace.rewards.items()} if trace else {},
        "metrics": dict(trace.metrics) if trace else dict(result.metrics),
        "info": _dump(trace.info) if trace else {},
        "is_completed": trace.is_completed if trace else result.error is None,
        "ok": not errors,
        "stop_condition": _stop_condition(trace, result),
        "is_timeout": result.stop_reason == "timeout",
        "errors": errors,
        "timing": _timing(result),
        "reward": trace.reward if trace else result.reward,
        "is_truncated": (trace.is_truncated if trace else False) or result.is_truncated,
        "num_turns": trace.num_turns if trace else result.turns,
        "num_input_tokens": input_tokens,
        "num_output_tokens": output_tokens,
        "num_total_tokens": input_tokens + output_tokens,
    }
    return record


def _list(messages: Any) -> list[Any]:
    return list(messages) if isinstance(messages, list) else [{"role": "user", "content": str(messages)}]


def _task(trace: Trace | None, result: RolloutResult) -> dict[str, Any]:
    if trace is None:  # the rollout failed before its task was set up: what the row says of it
        return {"type": None, "data": {"idx": result.example_id}, "key": (result.info or {}).get("task_key")}
    task = trace.task
    return {"type": task.type, "data": _dump(task.data), "key": task.key, "hash": task.hash}


def _stop_condition(trace: Trace | None, result: RolloutResult) -> str | None:
    if result.stop_reason == "timeout":
        return "timeout"
    if trace is not None and trace.stop_condition is not None:
        return trace.stop_condition
    return "error" if result.error is not None else result.stop_reason


def write_traces(
    run_dir: Path,
    results: list[RolloutResult],
    traces: dict[tuple[int, int], Trace],
    model: str,
    agent: dict[str, Any],
    resumed: bool = False,
) -> Path:
    """Append this session's records to ``run_dir/traces.jsonl`` (a resumed run keeps the lines an
    earlier session wrote; its rollouts without a kept trace are those, and are skipped)."""
    path = Path(run_dir) / TRACES_FILE
    with path.open("a", encoding="utf-8") as f:
        for result in sorted(results, key=lambda r: (r.example_id, r.rollout_index)):
            trace = traces.get((result.example_id, result.rollout_index))
            if trace is None and resumed:
                continue
            f.write(json.dumps(trace_record(result, trace, model, agent), default=str) + "\n")
    return path
