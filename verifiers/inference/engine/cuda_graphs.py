"""The engine's decoding step replayed from CUDA graphs, one graph per batch-size bucket.

Why: on a GPU a decoding step of a small model is bound by kernel launches, not arithmetic (the
252M-parameter preset launches about 660 kernels a step; their CPU-side launch time exceeds the
kernels' own). A captured graph replays every kernel of the step with one launch.

What is captured: `FastDecoder`'s step for ``B`` rows (the smallest bucket holding the running
rows) over the whole preallocated `SlotKV` width. Everything the graph reads lives at a fixed
address for as long as the graph is kept: its own input buffers (token, position and write column
per row, copied in before each replay), the cache's key/value buffers and padding mask, the
rotary table and the model's parameters. Rows past the running ones are padding: they write into
slots no running row owns (rows stay packed in ``[0, rows)``, and a new row's prefill, which runs
after the decoding forward, zeroes its mask row and writes its own columns), and their logits are
dropped. The attention over the whole width instead of the running rows' width costs at most
twice the columns (capacity doubles), which is cheap next to the launches saved.

Weight updates reach the graph: an optimizer step, a weight sync or `update_weights` writes the
parameters in place, so their storage (what the graph reads) keeps its address. A parameter
*replaced* by another tensor changes its address; every step compares the addresses and
recaptures when one moved, as it does when the cache is reallocated (it grows by doubling, so this
happens a few times per run) or the rotary table is rebuilt. Prefill stays eager (its shapes vary
with every prompt). Sampling, per-row settings and log-probabilities run after the graph, eagerly,
on its logits, exactly as after the eager step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from verifiers.inference.engine.fast_decode import FastDecoder

BUCKETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)
"""Batch sizes a graph is captured for; a step runs the smallest bucket holding its rows."""


def why_not(fast: FastDecoder | None, device: Any) -> str | None:
    """Why decoding steps cannot be replayed from CUDA graphs here, or None when they can."""
    import torch

    if fast is None:
        return "transformers' forward runs (graphs capture the engine's own step only)"
    if fast.lora:
        return "LoRA adapters (a captured graph would keep the adapters' state of its capture)"
    if getattr(device, "type", str(device)) != "cuda":
        return "not on a CUDA device"
    if not torch.cuda.is_available():
        return "CUDA is not available to this process"
    return None


@dataclass
class _Graph:
    graph: Any
    logits: Any  # [B, vocab], written by every replay


class GraphedDecode:
    """Replays `FastDecoder`'s decoding step from CUDA graphs (see the module doc).

    ``stats``: ``captures`` (graphs captured, recaptures included), ``replays`` and ``eager``
    (steps that ran without a graph: more rows than the largest bucket or the cache's capacity).
    """

    def __init__(self, fast: FastDecoder, *, max_rows: int = BUCKETS[-1]) -> None:
        self.fast = fast
        self.max_rows = max_rows
        self._graphs: dict[int, _Graph] = {}
        self._key: tuple[Any, ...] = ()
        self._pool: Any = None
        self._ids: Any = None
        self._pos: Any = None
        self._cols: Any = None
        self.stats = {"captures": 0, "replays": 0, "eager": 0}
        self.failed: str | None = None  # why capturing failed: every later step runs eagerly

    def bucket(self, rows: int, capacity: int) -> int | None:
        """The smallest bucket holding ``rows`` within the cache's ``capacity`` rows, or None."""
        for b in BUCKETS:
            if rows <= b <= min(capacity, self.max_rows):
                return b
        return None

    def step(self, ids: Any, pos: Any, cols: Any, rows: int, kv: Any) -> Any | None:
        """Logits ``[rows, vocab]`` of one decoding step, or None when no graph applies (run it eagerly).

        ``ids``, ``pos`` and ``cols`` are the rows' next tokens, positions and write columns
        (``[rows]`` or longer); the cache's mask already marks each row's new column.
        """
        b = self.bucket(rows, kv.rows_cap)
        if b is None or not kv.keys or self.failed is not None:
            self.stats["eager"] += 1
            return None
        key = self._state_key(kv)
        if key != self._key:
            self._graphs.clear()  # the old graphs read freed or moved memory: never replay them
            self._key = key
            self._buffers(kv)
        self._ids[:rows].copy_(ids[:rows])
        self._pos[:rows].copy_(pos[:rows])
        self._cols[:rows].copy_(cols[:rows])
        graph = self._graphs.get(b)
        if graph is None:
            try:
                graph = self._graphs[b] = self._capture(b, kv)
            except Exception as exc:  # an op this model's step runs that a graph cannot hold
                self.failed = f"capturing the step failed ({type(exc).__name__}: {exc})"
                self._graphs.clear()
                self._key = ()
                return None
            key = self._state_key(kv)
            if key != self._key:  # the warm-up rebuilt the rotary table: only the new graph reads the new one
                self._graphs, self._key = {b: graph}, key
        graph.graph.replay()
        self.stats["replays"] += 1
        return graph.logits[:rows]

    def _state_key(self, kv: Any) -> tuple[Any, ...]:
        """Addresses of everything a graph reads besides its own buffers."""
        rotary = self.fast.rotary
        tables = (rotary._cos.data_ptr(), rotary._sin.data_ptr()) if rotary._cos is not None else ()
        return (kv.rows_cap, kv.cols_cap, kv.attn.data_ptr(), *(t.data_ptr() for t in (*kv.keys, *kv.values)),
                *tables, *(p.data_ptr() for p in self.fast.model.parameters()))

    def _buffers(self, kv: Any) -> None:
        import torch

        n = min(kv.rows_cap, self.max_rows)
        self._ids = torch.zeros(n, dtype=torch.long, device=kv.attn.device)
        self._pos = torch.zeros(n, dtype=torch.long, device=kv.attn.device)
        self._cols = torch.zeros(n, dtype=torch.long, device=kv.attn.device)

    def _capture(self, b: int, kv: Any) -> _Graph:
        """Warm up, then capture the step for ``b`` rows over the cache's whole width.

        The warm-up runs really execute: the running rows write the same keys and values the replay
        writes next (same inputs, same weights), and the padding rows write into free slots.
        """
        import torch

        width = kv.cols_cap
        ids, pos, attn = self._ids[:b], self._pos[:b], kv.attn[:b, :width]
        kv.plan_decode(b, self._cols[:b], width)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):  # cuBLAS workspaces, the rotary table: allocated outside the graph
                self.fast(ids, pos, attn, kv)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            logits = self.fast(ids, pos, attn, kv)
        self._pool = graph.pool()
        self.stats["captures"] += 1
        return _Graph(graph, logits)
