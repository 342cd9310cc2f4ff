"""Token-exact training sequences from the token ids the server returned.

Multi-turn training data must not be rebuilt by re-tokenising the transcript
through the chat template: templates are not prefix-stable across turns and the
re-tokenised text differs from what was sampled. Instead, each model call
records the prompt ids the server saw and the ids it sampled. Turn k+1's prompt
starts with turn k's prompt + completion; what follows is environment or tool
text, which is kept for context but masked out of the loss.

Agent programs break that relation (a summary replaces the transcript, the template strips
earlier reasoning, a sub-agent has its own conversation): `split_token_rows` then gives the
calls as several rows, each growing by prefix, every sampled token in exactly one of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from verifiers.errors import EnvError

# TokenSequence, assemble_tokens and split_token_rows live in verifiers.types
# (RolloutResult.token_sequence / token_rows use them); this module keeps their import path.
from verifiers.types import (
    ProcessedOutputs,
    TokenSequence,
    TurnTokens,
    assemble_tokens,
    prefix_breaks,
    split_token_rows,
)

__all__ = [
    "TokenSequence",
    "TurnTokens",
    "assemble_tokens",
    "prefix_breaks",
    "process_results_from_tokens",
    "split_token_rows",
]


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
                f"rollout {i}: a turn's prompt does not extend the previous turn's tokens, so it is not one "
                "token sequence; split_token_rows (RolloutResult.token_rows) gives its calls as several rows"
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
