"""KV caches for continuous batching: the engine's preallocated `SlotKV`, and ``DynamicCache`` row surgery.

`SlotKV` (with `RowTable` for per-row device state) is what `InferenceEngine` decodes with. The
functions below it predate it and are still used on plain ``DynamicCache`` objects (the trainer's
log-probability pass): requests join and leave a running batch between decoding steps. Joining means
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


# -- preallocated slot storage for the engine ----------------------------------------------------
class SlotKV:
    """The engine's KV cache: per-layer buffers ``[rows_cap, kv_heads, cols_cap, head_dim]``, written in place.

    Why this layout: the old cache grew by ``torch.cat`` every decoding step (a full copy of the cache per
    token) and was copied again whenever a row joined or left. Here each batch row owns a *slot* (a buffer
    row); slot ``i`` holds its sequence in columns ``[0, used_i)`` (left padding of its prefill group
    included), and a decoding step writes each row's new key/value at its own column ``used_i`` with one
    ``scatter_`` per layer. Rows stay packed in slots ``[0, B)``: a leaving row's slot is refilled by moving
    one of the last rows into it (a copy of that row only, never of the whole cache).

    Capacity grows geometrically (doubling) up to limits the engine derives from its KV-token budget, so a
    batch of short completions never pays for ``max_model_len`` columns, while growth copies stay amortised
    O(1) per token. ``attn`` is the matching ``[rows_cap, cols_cap]`` padding mask (1 = real token).
    """

    MIN_COLS = 64

    def __init__(self, device: Any) -> None:
        self.device = device
        self.keys: list[Any] = []
        self.values: list[Any] = []
        self.rows_cap = 0
        self.cols_cap = 0
        self.attn: Any = None
        # What the next forward does: ("decode", 0, rows, write_cols, width) or ("prefill", start, stop, offset, n).
        self.plan: tuple[Any, ...] = ("decode", 0, 0, None, 0)
        self.peak_bytes = 0
        # Captured decoding steps (`verifiers.inference.engine.cuda_graphs`) read these buffers at fixed
        # addresses: there the columns grow straight to the bound asked for and an empty batch keeps them.
        self.keep = False

    # -- sizes -----------------------------------------------------------------------------------
    def nbytes(self) -> int:
        """Bytes of the allocated K/V buffers (what the budget bounds)."""
        return sum(int(t.numel()) * t.element_size() for t in (*self.keys, *self.values))

    def capacity_tokens(self) -> int:
        return self.rows_cap * self.cols_cap

    def _note_peak(self) -> None:
        self.peak_bytes = max(self.peak_bytes, self.nbytes())

    def reserve(self, rows: int, cols: int, *, keep_rows: int, keep_cols: int, max_tokens: int, max_cols: int) -> None:
        """Make room for ``rows`` x ``cols``; growth doubles, but stays within ``max_tokens`` / ``max_cols``.

        ``keep_rows`` x ``keep_cols`` is the live region copied into a reallocated buffer. When a
        reallocation happens, stale capacity beyond the current limits is dropped, so the buffer never
        exceeds the budget the engine admitted against.
        """
        import torch

        if rows <= self.rows_cap and cols <= self.cols_cap:
            return
        max_cols = max(max_cols, cols)
        if cols > self.cols_cap and self.keep:
            new_cols = max_cols
        elif cols > self.cols_cap:
            new_cols = max(cols, min(max_cols, max(2 * self.cols_cap, self.MIN_COLS)))
        else:  # only rows grow: also drop stale columns beyond today's limit
            new_cols = max(cols, keep_cols, min(self.cols_cap, max_cols))
        row_limit = max(rows, max_tokens // new_cols)
        if rows > self.rows_cap:
            new_rows = max(rows, min(row_limit, max(2 * self.rows_cap, 8)))
        else:
            new_rows = max(rows, keep_rows, min(self.rows_cap, row_limit))
        for store in (self.keys, self.values):
            for i, old in enumerate(store):
                _, h, _, d = old.shape
                new = torch.zeros(new_rows, h, new_cols, d, dtype=old.dtype, device=old.device)
                if keep_rows and keep_cols:
                    new[:keep_rows, :, :keep_cols] = old[:keep_rows, :, :keep_cols]
                store[i] = new
                del old
        attn = torch.zeros(new_rows, new_cols, dtype=torch.long, device=self.device)
        if self.attn is not None and keep_rows and keep_cols:
            attn[:keep_rows, :keep_cols] = self.attn[:keep_rows, :keep_cols]
        self.attn = attn
        self.rows_cap, self.cols_cap = new_rows, new_cols
        self._note_peak()

    def release(self) -> None:
        """Free every buffer (the batch is empty): memory goes back to the allocator."""
        self.keys, self.values, self.attn = [], [], None
        self.rows_cap = self.cols_cap = 0

    # -- the forward's view ------------------------------------------------------------------------
    def plan_decode(self, rows: int, write_cols: Any, width: int) -> None:
        """Next forward: one token for each of rows ``[0, rows)``, written at column ``write_cols[i]``."""
        self.plan = ("decode", 0, rows, write_cols, width)

    def plan_prefill(self, start: int, stop: int, offset: int, n: int) -> None:
        """Next forward: columns ``[offset, offset + n)`` of slots ``[start, stop)`` (a prefill chunk)."""
        self.plan = ("prefill", start, stop, offset, n)

    def query_offset(self) -> int:
        """Columns before the query: what transformers calls the cache's sequence length."""
        kind, _, _, a, b = self.plan
        return b - 1 if kind == "decode" else a

    def write(self, layer: int, k: Any, v: Any) -> tuple[Any, Any]:
        """Store this forward's keys/values of ``layer`` in place; return the live ``[rows, h, width, d]`` views."""
        import torch

        while len(self.keys) <= layer:  # first forward after (re)allocation: shapes come from the model
            _, h, _, d = k.shape
            self.keys.append(torch.zeros(self.rows_cap, h, self.cols_cap, d, dtype=k.dtype, device=k.device))
            self.values.append(torch.zeros(self.rows_cap, h, self.cols_cap, d, dtype=v.dtype, device=v.device))
            self._note_peak()
        kb, vb = self.keys[layer], self.values[layer]
        kind, start, stop, a, b = self.plan
        if kind == "decode":
            rows, cols, width = stop, a, b
            idx = cols.view(rows, 1, 1, 1).expand(rows, k.shape[1], 1, k.shape[3])
            kb[:rows].scatter_(2, idx, k.to(kb.dtype))
            vb[:rows].scatter_(2, idx, v.to(vb.dtype))
            return kb[:rows, :, :width], vb[:rows, :, :width]
        offset, n = a, b
        kb[start:stop, :, offset : offset + n] = k
        vb[start:stop, :, offset : offset + n] = v
        return kb[start:stop, :, : offset + n], vb[start:stop, :, : offset + n]

    # -- rows ------------------------------------------------------------------------------------
    def copy_rows(self, src: Any, dst: Any, width: int) -> None:
        """Copy slots ``src`` onto slots ``dst`` (columns ``[0, width)``): row moves and ``n > 1`` expansion."""
        for buf in (*self.keys, *self.values):
            view = buf[:, :, :width]
            view.index_copy_(0, dst, view.index_select(0, src))
        # The destination's previous occupant may have used more columns: clear its whole mask row.
        self.attn.index_fill_(0, dst, 0)
        view = self.attn[:, :width]
        view.index_copy_(0, dst, view.index_select(0, src))

    def cache(self, num_layers: int) -> Any:
        """A transformers ``Cache`` whose layers read and write this storage."""
        return _slot_cache_class()(self, num_layers)


def _slot_cache_class() -> Any:
    """Build (once) the ``Cache`` subclass; transformers is imported lazily like torch."""
    global _SLOT_CACHE
    if _SLOT_CACHE is not None:
        return _SLOT_CACHE
    from transformers.cache_utils import Cache, CacheLayerMixin

    class SlotLayer(CacheLayerMixin):
        """One model layer's window onto `SlotKV` (full attention only)."""

        is_sliding = False
        is_compileable = False

        def __init__(self, store: SlotKV, layer: int) -> None:
            super().__init__()
            self.store, self.layer = store, layer
            self.is_initialized = True

        def lazy_initialization(self, key_states: Any, value_states: Any) -> None:
            return None

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            return self.store.write(self.layer, key_states, value_states)

        def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
            return self.store.query_offset() + query_length, 0

        def get_seq_length(self) -> int:
            return self.store.query_offset()

        def get_max_length(self) -> int:
            return -1

    class SlotCache(Cache):
        """A ``Cache`` over `SlotKV`; the model's forward sees an ordinary transformers cache."""

        def __init__(self, store: SlotKV, num_layers: int) -> None:
            super().__init__(layers=[SlotLayer(store, i) for i in range(num_layers)])

    _SLOT_CACHE = SlotCache
    return SlotCache


_SLOT_CACHE: Any = None


class RowTable:
    """Per-row device tensors (positions, sampling parameters, ...) that follow the rows' slots.

    Built when rows join, instead of Python lists rebuilt every step; moved with `copy_rows` when the
    batch is compacted, exactly like the KV slots.
    """

    def __init__(self, device: Any) -> None:
        self.device = device
        self.cap = 0
        self.t: dict[str, Any] = {}

    def ensure(self, rows: int) -> None:
        """Grow every column to hold ``rows`` rows (doubling)."""
        import torch

        if rows <= self.cap:
            return
        cap = max(rows, 2 * self.cap, 8)
        for name, old in self.t.items():
            new = torch.zeros((cap, *old.shape[1:]), dtype=old.dtype, device=old.device)
            new[: self.cap] = old
            self.t[name] = new
        self.cap = cap

    def add(self, name: str, dtype: Any, width: int | None = None) -> Any:
        """Create column ``name`` (zeros) if missing; ``width`` makes it ``[cap, width]``."""
        import torch

        if name not in self.t:
            shape = (self.cap,) if width is None else (self.cap, width)
            self.t[name] = torch.zeros(shape, dtype=dtype, device=self.device)
        return self.t[name]

    def set(self, name: str, start: int, values: list[Any]) -> None:
        """Rows ``[start, start + len(values))`` of ``name`` := ``values`` (one host-to-device copy)."""
        import torch

        col = self.t[name]
        col[start : start + len(values)] = torch.tensor(values, dtype=col.dtype, device=self.device)

    def copy_rows(self, src: Any, dst: Any) -> None:
        for col in self.t.values():
            col.index_copy_(0, dst, col.index_select(0, src))

    def drop(self, name: str) -> None:
        self.t.pop(name, None)
