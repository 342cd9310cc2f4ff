"""A request's checks before it is queued: token ids in the vocabulary, the context length, the KV budget.

The messages use vLLM's wording ("maximum context length"), so OpenAI-style clients map them to
their overlong-prompt error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from verifiers.errors import OverlongPromptError
from verifiers.inference.engine.kv_budget import Budget
from verifiers.inference.engine.requests import InvalidRequestError
from verifiers.inference.engine.sampling import SamplingParams


def check_token_ids(ids: Sequence[Any], param: str, vocab: int) -> None:
    """Raise `InvalidRequestError` unless every id is an int in ``[0, vocab)``."""
    for t in ids:
        if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab:
            raise InvalidRequestError(
                f"'{param}' holds token id {t!r}, outside this model's vocabulary [0, {vocab})", param=param
            )


def check_request(prompt_ids: Sequence[int], params: SamplingParams, n: int, *, vocab: int, max_model_len: int,
                  budget: Budget) -> int:
    """Validate a request without running it; returns its effective ``max_tokens``."""
    if not prompt_ids:
        raise InvalidRequestError("the prompt is empty: send at least one token", param="prompt")
    if n < 1:
        raise InvalidRequestError(f"n must be >= 1, got {n}", param="n")
    check_token_ids(prompt_ids, "prompt", vocab)
    check_token_ids(params.stop_token_ids, "stop_token_ids", vocab)
    room = max_model_len - len(prompt_ids)
    if room <= 0:
        raise OverlongPromptError(
            f"This model's maximum context length is {max_model_len} tokens. However, your request has "
            f"{len(prompt_ids)} input tokens. Please reduce the length of the input messages."
        )
    max_tokens = params.max_tokens if params.max_tokens is not None else room
    if max_tokens > room:
        raise OverlongPromptError(
            f"This model's maximum context length is {max_model_len} tokens. However, you requested "
            f"{len(prompt_ids) + max_tokens} tokens ({len(prompt_ids)} in the messages, {max_tokens} in the "
            "completion). Please reduce the length of the messages or completion."
        )
    worst = len(prompt_ids) + max_tokens
    if budget.never_fits(n, worst):
        raise OverlongPromptError(
            f"This request needs up to {n * worst} KV-cache tokens (n={n} x ({len(prompt_ids)} prompt + "
            f"{max_tokens} max_tokens)), more than the engine's max_kv_tokens={budget.max_tokens} even when "
            "idle. Lower max_tokens or n, or start the engine with a larger max_kv_tokens."
        )
    return max_tokens
