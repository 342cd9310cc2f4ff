"""Rollout results as a ``datasets.Dataset`` (what 0.1.x ``env.make_dataset`` returned).

Completions that hold tool calls are stored with each call as JSON text, as 0.1.x
stored them, so Arrow sees one simple column type whatever the calls contain.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["results_to_dataset"]


def results_to_dataset(
    results: Any,
    rollouts_per_example: int = 1,
    state_columns: Sequence[str] | None = None,
) -> Any:
    """0.1.x ``make_dataset``: prompt, completion, answer, task, reward, average_reward, info, metrics."""
    from datasets import Dataset

    n = len(results.reward)
    if rollouts_per_example > 1:
        average = []
        for start in range(0, n, rollouts_per_example):
            chunk = results.reward[start : start + rollouts_per_example]
            average.extend([sum(chunk) / len(chunk)] * len(chunk))
    else:
        average = list(results.reward)
    cols: dict[str, list[Any]] = {
        "prompt": list(results.prompt),
        "completion": [_sanitize_tool_calls(c) for c in results.completion],
        "answer": list(results.answer),
        "task": list(results.task),
        "reward": list(results.reward),
        "average_reward": average,
    }
    if results.info and any(results.info):
        # JSON text: Arrow would otherwise merge differently-keyed dicts into one struct
        cols["info"] = [json.dumps(i, default=str) for i in results.info]
    for name, values in results.metrics.items():
        cols.setdefault(name, list(values))
    for col in state_columns or []:
        if results.state and col in results.state[0]:
            cols[col] = [s.get(col) for s in results.state]
        else:
            logger.warning("make_dataset: column %r not found in state, skipped", col)
    return Dataset.from_dict(cols)


def _sanitize_tool_calls(messages: Any) -> Any:
    """As 0.1.x stored completions: each tool call as JSON text, so Arrow sees one simple type."""
    if not isinstance(messages, list):
        return messages
    out = []
    for m in messages:
        if "tool_calls" in m:
            calls = [c.model_dump() if hasattr(c, "model_dump") else dict(c) for c in m.get("tool_calls") or []]
            out.append({"role": m["role"], "content": m.get("content", ""), "tool_calls": [json.dumps(c) for c in calls]})
        else:
            out.append(dict(m))
    return out
