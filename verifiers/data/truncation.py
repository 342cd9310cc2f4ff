"""Cut a token sequence down to a length limit.

The four modes follow verl's RLHFDataset (``truncation=left|right|middle|error``):

- ``left`` keeps the *last* ``max_len`` tokens (drops the start; the end of a chat,
  where the question and the generation prompt live, survives),
- ``right`` keeps the *first* ``max_len`` tokens,
- ``middle`` keeps the first ``max_len // 2`` and the last ``max_len - max_len // 2``
  tokens (instructions at the top and the generation prompt at the bottom survive),
- ``error`` refuses, naming the length, the limit and what to change.

Tokens 1..10 with ``max_len=4``: left ``[7, 8, 9, 10]``, right ``[1, 2, 3, 4]``,
middle ``[1, 2, 9, 10]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, get_args

from verifiers.errors import ConfigError

TruncationMode = Literal["left", "right", "middle", "error"]
TRUNCATION_MODES: tuple[str, ...] = get_args(TruncationMode)


def check_truncation_mode(mode: str) -> TruncationMode:
    """Validate a mode given as a string (from a config file or the CLI)."""
    if mode not in TRUNCATION_MODES:
        raise ConfigError(f"unknown truncation mode {mode!r}; use one of {', '.join(TRUNCATION_MODES)}")
    return mode  # type: ignore[return-value]


def truncate(ids: Sequence[int], max_len: int, mode: TruncationMode = "error") -> list[int]:
    """Return ``ids`` cut to at most ``max_len`` tokens according to ``mode`` (always a new list).

    Sequences that already fit are returned unchanged whatever the mode, so ``error``
    only fires on sequences that are actually too long.
    """
    check_truncation_mode(mode)
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1:
        raise ConfigError(f"max_len must be a positive integer, got {max_len!r}")
    ids = list(ids)
    n = len(ids)
    if n <= max_len:
        return ids
    if mode == "left":
        return ids[n - max_len :]
    if mode == "right":
        return ids[:max_len]
    if mode == "middle":
        head = max_len // 2
        tail = max_len - head
        return ids[:head] + ids[n - tail :]
    raise ConfigError(
        f"sequence of {n} tokens is longer than the limit of {max_len} tokens; raise the limit "
        f"(e.g. max_prompt_len), drop long rows first with filter_overlong(...), "
        f"or choose truncation 'left', 'right' or 'middle'"
    )
