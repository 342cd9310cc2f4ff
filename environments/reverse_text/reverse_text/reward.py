"""Longest-common-subsequence similarity: partial credit for nearly reversed text.

Exact match would give a model that gets one character wrong the same score as one
that wrote nothing; LCS / max(len) instead falls off smoothly with every missing,
extra or misplaced character, which gives RL a usable gradient.
"""

from __future__ import annotations

__all__ = ["lcs_length", "lcs_similarity"]


def lcs_length(a: str, b: str) -> int:
    """Length of the longest common subsequence of ``a`` and ``b``.

    The classic DP ``L[i][j] = L[i-1][j-1] + 1 if a[i] == b[j] else max(L[i-1][j], L[i][j-1])``,
    computed one row at a time with each row stored as the bits of an int (Hyyrö's
    bit-parallel form, O(len(a) * len(b) / 64)). A model can put thousands of
    characters in its answer; the quadratic pure-Python table would then stall scoring.
    """
    if not a or not b:
        return 0
    if len(a) < len(b):
        a, b = b, a  # the bit row runs over the longer string
    masks: dict[str, int] = {}
    for i, ch in enumerate(a):
        masks[ch] = masks.get(ch, 0) | (1 << i)
    full = (1 << len(a)) - 1
    row = full  # a 1 bit at position i means "the LCS does not grow at a[i]" (so far)
    for ch in b:
        match = row & masks.get(ch, 0)
        row = ((row + match) | (row - match)) & full
    return len(a) - row.bit_count()


def lcs_similarity(predicted: str, target: str) -> float:
    """LCS length divided by the longer length, in [0, 1]; 1.0 only for identical strings."""
    if not predicted and not target:
        return 1.0
    longest = max(len(predicted), len(target))
    return lcs_length(predicted, target) / longest
