"""Whether oneDNN-packed products beat ``F.linear`` on this machine, at a model's shapes: measured.

Why: packing the projection weights pays where PyTorch's float32 product is slow for the CPU at
hand and costs where it is not. On an AMD EPYC (AVX-512), MKL's ``F.linear`` ran at 105-115
GFLOP/s a thread and a prepacked oneDNN product at 250-270, so the engine and the learner pack. On
an Intel Xeon with the same PyTorch, the two products are within a few percent of each other,
slower for oneDNN at small shapes, and the packing itself (the weights and their transposes,
anew after every optimizer step, and the learner's activations for each weight gradient) only
costs: the 0.8M-parameter trainer step spent 0.128 s in forward+backward packed and 0.090 s with
``F.linear``, and 0.087 s vs 0.070 s generating (`benchmarks/trainer_step.py`). Which one is
faster is the machine's, so it is measured once per shape, thread count and use, not assumed.

The measurement runs the products of one layer of the model (query/key/value fused, output,
gate/up fused, down) both ways on random inputs, interleaved, and keeps each side's best of
`REPEATS` (wall time: with several torch threads the work is not all on the calling thread; the best
of several rounds is the one other work interrupted least). What is timed is what each use pays:

- ``"inference"`` (the engine: decoding and prefill): the forward products alone (packing happens
  once a weight update);
- ``"trained"`` (the learner on trained weights): packing the weights and their transposes, the
  forward product, the input's gradient, and the weight's gradient (packed: the activations are
  packed for it) against ``F.linear`` and two ``mm``;
- ``"frozen"`` (a LoRA run's base weights, packed once and kept): the forward and the input's gradient.

Packing is chosen when it is at least `MARGIN` faster: a near tie keeps ``F.linear`` (no copy of
the weights in memory). The first use in a process pays the measurement: milliseconds at the
engine's 64 rows, about half a second for a 135M model's learner shapes.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

REPEATS = 5
"""Interleaved rounds of each side; the best is kept."""

MARGIN = 0.95
"""Packing is chosen when its time is below this share of ``F.linear``'s."""

ROWS = {"inference": 64, "trained": 512, "frozen": 512}
"""Rows multiplied per product in the measurement: the engine's decoding batch, a learner's micro-batch."""


@dataclass(frozen=True)
class ProductChoice:
    """The measured decision for one use: packed products or ``F.linear``, with both times."""

    packed: bool
    packed_ms: float
    plain_ms: float
    use: str
    rows: int

    def reason(self) -> str | None:
        """Why the products are not packed (None when they are), with the figures, for logs."""
        if self.packed:
            return None
        return (f"F.linear is as fast here ({self.use} products of one layer at {self.rows} rows: "
                f"packed {self.packed_ms:.2f} ms, F.linear {self.plain_ms:.2f} ms)")


def layer_shapes(lm: Any) -> tuple[tuple[int, int], ...]:
    """``(in, out)`` of one layer's products as the packed path fuses them: qkv, o, gate/up, down."""
    layer = lm.model.layers[0]
    a, m = layer.self_attn, layer.mlp
    qkv = a.q_proj.out_features + a.k_proj.out_features + a.v_proj.out_features
    return ((a.q_proj.in_features, qkv), (a.o_proj.in_features, a.o_proj.out_features),
            (m.gate_proj.in_features, m.gate_proj.out_features + m.up_proj.out_features),
            (m.down_proj.in_features, m.down_proj.out_features))


def choose(lm: Any, use: str) -> ProductChoice:
    """Packed products or ``F.linear`` for ``lm``'s projections in ``use`` ("inference", "trained", "frozen")."""
    import torch

    return measure(layer_shapes(lm), use, torch.get_num_threads())


@functools.cache
def measure(shapes: tuple[tuple[int, int], ...], use: str, threads: int) -> ProductChoice:
    """Time ``shapes``' products both ways for ``use`` (cached: per process, shape and thread count)."""
    import torch

    del threads  # part of the cache key: the products' speed depends on it
    rows = ROWS[use]
    with torch.no_grad():
        sides = [_sides(torch.randn(rows, i), torch.randn(o, i) * i**-0.5, torch.randn(rows, o), use)
                 for i, o in shapes]
        packed_fns = [s[0] for s in sides]
        plain_fns = [s[1] for s in sides]
        for fn in (*packed_fns, *plain_fns):  # first calls create oneDNN's primitives: not timed
            fn()
        packed_s = plain_s = float("inf")
        for _ in range(REPEATS):
            packed_s = min(packed_s, _seconds(packed_fns))
            plain_s = min(plain_s, _seconds(plain_fns))
    return ProductChoice(packed=packed_s < MARGIN * plain_s, packed_ms=packed_s * 1e3, plain_ms=plain_s * 1e3,
                         use=use, rows=rows)


def _sides(x: Any, w: Any, dy: Any, use: str) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """The packed and the plain work of one product for ``use``."""
    import torch.nn.functional as F

    from verifiers.inference.engine.projections import ROWS_HINT, pack, packed_product

    hint = ROWS_HINT if use == "inference" else x.shape[0]
    kept, kept_t = pack(w, hint), pack(w.t().contiguous(), hint)

    def packed() -> None:
        pw, pw_t = (pack(w, hint), pack(w.t().contiguous(), hint)) if use == "trained" else (kept, kept_t)
        packed_product(x, pw, None)
        if use != "inference":
            packed_product(dy, pw_t, None)
        if use == "trained":
            packed_product(dy.t(), pack(x.t().contiguous(), dy.shape[1]), None)

    def plain() -> None:
        F.linear(x, w)
        if use != "inference":
            dy.mm(w)
        if use == "trained":
            dy.t().mm(x)

    return packed, plain


def _seconds(fns: list[Callable[[], Any]]) -> float:
    t0 = time.perf_counter()
    for fn in fns:
        fn()
    return time.perf_counter() - t0
