"""Row and column surgery on a transformers ``DynamicCache`` for continuous batching.

Requests join and leave a running batch between decoding steps. Joining means
concatenating the newcomers' prefill cache with the running one along the batch axis,
after left-padding the shorter of the two along the sequence axis; leaving means
selecting the surviving rows; and once rows leave, columns that are padding in every
remaining row are trimmed so the attention span does not grow without bound.
Each layer holds ``keys``/``values`` of shape ``[batch, kv_heads, seq, head_dim]``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def _layers(cache: Any) -> list[Any]:
    return list(cache.layers)


def select_rows(cache: Any, idx: torch.Tensor) -> None:
    """Keep only the batch rows ``idx`` (in that order), in place."""
    for layer in _layers(cache):
        layer.keys = layer.keys.index_select(0, idx)
        layer.values = layer.values.index_select(0, idx)


def left_pad(cache: Any, n: int) -> None:
    """Prepend ``n`` zero columns (masked out by the attention mask), in place."""
    import torch

    if n <= 0:
        return
    for layer in _layers(cache):
        b, h, _, d = layer.keys.shape
        pad = torch.zeros(b, h, n, d, dtype=layer.keys.dtype, device=layer.keys.device)
        layer.keys = torch.cat([pad, layer.keys], dim=2)
        layer.values = torch.cat([pad, layer.values], dim=2)


def trim_left(cache: Any, n: int) -> None:
    """Drop the first ``n`` columns, in place."""
    if n <= 0:
        return
    for layer in _layers(cache):
        layer.keys = layer.keys[:, :, n:].contiguous()
        layer.values = layer.values[:, :, n:].contiguous()


def concat_rows(into: Any, other: Any) -> None:
    """Append ``other``'s rows to ``into`` (both already the same length), in place."""
    import torch

    for a, b in zip(_layers(into), _layers(other), strict=True):
        a.keys = torch.cat([a.keys, b.keys], dim=0)
        a.values = torch.cat([a.values, b.values], dim=0)


def seq_len(cache: Any) -> int:
    layers = _layers(cache)
    return int(layers[0].keys.shape[2]) if layers else 0
