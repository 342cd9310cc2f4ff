"""Pad ragged token rows into rectangular tensors, and derive position ids from the mask.

Prompts are left-padded (verl, TRL) so every row's last prompt token sits in the same
column and generation can start right after it; completions and per-token values
(loss masks, logprobs, advantages) are right-padded. The padding side of a per-token
value tensor must match that of the ids it belongs to, so ``pad_2d`` takes the side
explicitly.

torch is imported inside the functions: this module is importable in a core-only install.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from verifiers.errors import ConfigError

if TYPE_CHECKING:
    import torch

PadSide = Literal["left", "right"]


def _target_length(lengths: list[int], length: int | None) -> int:
    longest = max(lengths, default=0)
    if length is None:
        return longest
    if length < longest:
        raise ConfigError(
            f"cannot pad to length {length}: the longest row has {longest} entries; "
            f"truncate rows first (verifiers.data.truncate) or pass a larger length"
        )
    return length


def _pad_rows(
    seqs: Sequence[Sequence[Any]], pad_value: Any, side: str, length: int | None, dtype: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    import torch

    if side not in ("left", "right"):
        raise ConfigError(f"padding side must be 'left' or 'right', got {side!r}")
    rows = [list(s) for s in seqs]
    width = _target_length([len(r) for r in rows], length)
    padded: list[list[Any]] = []
    flags: list[list[int]] = []
    for row in rows:
        fill = width - len(row)
        if side == "left":
            padded.append([pad_value] * fill + row)
            flags.append([0] * fill + [1] * len(row))
        else:
            padded.append(row + [pad_value] * fill)
            flags.append([1] * len(row) + [0] * fill)
    values = torch.tensor(padded, dtype=dtype).reshape(len(rows), width)
    mask = torch.tensor(flags, dtype=torch.long).reshape(len(rows), width)
    return values, mask


def left_pad(
    seqs: Sequence[Sequence[int]], pad_id: int, *, length: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask)``, both ``LongTensor[B, T]``, padded on the left.

    ``T`` is the longest row, or ``length`` when given (an error if a row is longer).
    """
    return _pad_rows(seqs, pad_id, "left", length, _long())


def right_pad(
    seqs: Sequence[Sequence[int]], pad_id: int, *, length: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask)``, both ``LongTensor[B, T]``, padded on the right."""
    return _pad_rows(seqs, pad_id, "right", length, _long())


def pad_2d(
    values: Sequence[Sequence[float]],
    pad_value: float,
    side: PadSide = "right",
    *,
    length: int | None = None,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Pad per-token values (loss masks, logprobs, advantages) the same way as their ids.

    Default dtype is ``float32``; pass ``dtype=torch.long`` for integer masks.
    """
    import torch

    padded, _ = _pad_rows(values, pad_value, side, length, dtype or torch.float32)
    return padded


def position_ids_from_mask(mask: torch.Tensor) -> torch.Tensor:
    """Position ids ``clip(cumsum(mask) - 1, 0)`` along the last dimension.

    With left padding the first real token gets position 0 and pads get 0 too (their
    value is irrelevant: they are masked out). Example: mask ``[0, 0, 1, 1, 1]`` gives
    ``[0, 0, 0, 1, 2]``.
    """
    import torch

    return torch.clip(torch.cumsum(mask.long(), dim=-1) - 1, min=0)


def _long() -> Any:
    import torch

    return torch.long
