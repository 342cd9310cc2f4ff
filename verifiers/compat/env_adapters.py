"""0.1.x shapes around the environment API: extra constructor kwargs, inputs, datasets, training outputs.

These adapters keep the core typed while old environments and trainers keep the
shapes they were written against:

- `set_legacy_attributes`: 0.1.x ``Environment(**kwargs)``/``Rubric(**kwargs)`` stored
  every extra keyword as an attribute, and environments read them back
  (``self.judge_model``...). We do the same, but never let such a keyword overwrite
  one of our own attributes or methods (a warning says which were skipped).
- `GenerateInputs`, `ProcessedOutputs`: the 0.1.x pydantic models of ``generate``'s
  input columns and of ``process_env_results_vllm``'s output.
- `process_results_from_tokens`: 0.1.x ``process_env_results_vllm`` computed from the
  token ids and logprobs the server returned per turn (``state["tokens"]``), never by
  re-tokenising the transcript.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from verifiers.types import GenerateInputs, ProcessedOutputs

logger = logging.getLogger(__name__)

__all__ = [
    "GenerateInputs",
    "ProcessedOutputs",
    "generate_inputs_to_columns",
    "process_results_from_tokens",
    "set_legacy_attributes",
]


def set_legacy_attributes(obj: Any, kwargs: Mapping[str, Any]) -> None:
    """Set each keyword as an attribute of ``obj``, skipping (with a warning) those that shadow one."""
    shadowing = []
    for name, value in kwargs.items():
        if hasattr(obj, name):
            shadowing.append(name)
            continue
        setattr(obj, name, value)
    if shadowing:
        logger.warning(
            "%s: keyword argument(s) %s not stored as attributes: the names are already taken by %s's own "
            "attributes or methods",
            type(obj).__name__,
            sorted(shadowing),
            type(obj).__name__,
        )


def generate_inputs_to_columns(inputs: GenerateInputs) -> dict[str, list[Any]]:
    """The columns that were given (``None`` columns dropped; ``completion`` is not an input)."""
    return {k: v for k, v in inputs.model_dump().items() if v is not None and k != "completion"}


def process_results_from_tokens(
    states: Sequence[Mapping[str, Any]],
    rewards: Sequence[float],
    max_seq_len: int = -1,
    mask_env_responses: bool = False,
    mask_truncated_completions: bool = False,
    zero_truncated_completions: bool = False,
) -> ProcessedOutputs:
    """0.1.x ``process_env_results_vllm`` from the per-turn token ids in ``state["tokens"]``.

    The prompt is the first call's prompt ids (``prompt_mask`` all 0, as in 0.1.x); the
    completion is every sampled token (mask 1, the sampler's logprobs) with the
    environment/tool tokens between turns (mask 1, or 0 with ``mask_env_responses``;
    logprob 0). Sequences longer than ``max_seq_len`` are cut as 0.1.x cut them.
    """
    from verifiers.errors import EnvError
    from verifiers.rollout.tokens import assemble_tokens
    from verifiers.types import TurnTokens

    if len(states) != len(rewards):
        raise EnvError(f"got {len(states)} states but {len(rewards)} rewards")
    out = ProcessedOutputs()
    for i, (state, reward) in enumerate(zip(states, rewards, strict=True)):
        turns = [t if isinstance(t, TurnTokens) else TurnTokens.model_validate(t) for t in state.get("tokens") or []]
        if not turns:
            raise EnvError(
                f"rollout {i} has no token ids: ask the server for them (vLLM or the embedded server: "
                "sampling_args={'logprobs': True, 'extra_body': {'return_token_ids': True}})"
            )
        seq = assemble_tokens(turns)
        if not seq.prefix_consistent:
            raise EnvError(
                f"rollout {i}: a turn's prompt does not extend the previous turn's tokens, so it cannot "
                "be assembled token-exactly"
            )
        prompt_ids = list(seq.prompt_ids)
        prompt_mask = [0] * len(prompt_ids)
        completion_ids = list(seq.completion_ids)
        completion_mask = [1 if (m or not mask_env_responses) else 0 for m in seq.completion_mask]
        completion_logprobs = list(seq.completion_logprobs)
        truncated = False
        if max_seq_len > 0 and len(prompt_ids) + len(completion_ids) > max_seq_len:
            prompt_ids, prompt_mask = prompt_ids[:max_seq_len], prompt_mask[:max_seq_len]
            room = max_seq_len - len(prompt_ids)
            completion_ids = completion_ids[:room]
            completion_mask = completion_mask[:room]
            completion_logprobs = completion_logprobs[:room]
            truncated = True
        if truncated and mask_truncated_completions:
            completion_mask = [0] * len(completion_ids)
        out.prompt_ids.append(prompt_ids)
        out.prompt_mask.append(prompt_mask)
        out.completion_ids.append(completion_ids)
        out.completion_mask.append(completion_mask)
        out.completion_logprobs.append(completion_logprobs)
        out.rewards.append(0.0 if (truncated and zero_truncated_completions) else float(reward))
    return out


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
