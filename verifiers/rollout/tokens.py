"""Token-exact training sequences from the token ids the server returned.

Multi-turn training data must not be rebuilt by re-tokenising the transcript
through the chat template: templates are not prefix-stable across turns and the
re-tokenised text differs from what was sampled. Instead, each model call
records the prompt ids the server saw and the ids it sampled. Turn k+1's prompt
starts with turn k's prompt + completion; what follows is environment or tool
text, which is kept for context but masked out of the loss.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field

from verifiers.types import TurnTokens


class TokenSequence(BaseModel):
    """One rollout as a single token sequence: ``prompt_ids + completion_ids``.

    ``completion_mask`` is 1 on tokens the model sampled (trained on) and 0 on
    environment / tool tokens inserted between turns. ``completion_logprobs`` are
    the sampler's logprobs (0 where masked). The attention mask is all ones over
    the sequence and is kept separate from this loss mask.
    """

    prompt_ids: list[int] = Field(default_factory=list)
    completion_ids: list[int] = Field(default_factory=list)
    completion_mask: list[int] = Field(default_factory=list)
    completion_logprobs: list[float] = Field(default_factory=list)
    prefix_consistent: bool = True
    """False when a turn's prompt did not extend the previous turn's tokens; such a
    rollout cannot be trained on token-exactly and should be dropped or re-tokenised."""


def assemble_tokens(turns: Sequence[TurnTokens]) -> TokenSequence:
    if not turns:
        return TokenSequence()
    first = turns[0]
    out = TokenSequence(prompt_ids=list(first.prompt_ids))
    seen = list(first.prompt_ids)
    for i, turn in enumerate(turns):
        if i > 0:
            if turn.prompt_ids[: len(seen)] != seen:
                out.prefix_consistent = False
                break
            inserted = turn.prompt_ids[len(seen) :]
            out.completion_ids.extend(inserted)
            out.completion_mask.extend([0] * len(inserted))
            out.completion_logprobs.extend([0.0] * len(inserted))
            seen.extend(inserted)
        logprobs = list(turn.completion_logprobs)
        if len(logprobs) != len(turn.completion_ids):
            logprobs = [0.0] * len(turn.completion_ids)
        out.completion_ids.extend(turn.completion_ids)
        out.completion_mask.extend([1] * len(turn.completion_ids))
        out.completion_logprobs.extend(logprobs)
        seen.extend(turn.completion_ids)
    return out
