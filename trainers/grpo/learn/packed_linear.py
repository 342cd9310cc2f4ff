"""The learner's projections as oneDNN products of packed weights, with autograd.

Why: PyTorch's float32 ``F.linear`` and its backward reach 105-115 GFLOP/s a thread on an AMD
EPYC with AVX-512 (where MKL's products run well below the chip's rate), while oneDNN's product of
a prepacked weight reaches 250-270: the forward, the input's gradient and the weight's gradient of
the 25M-parameter model's projections took 237 ms a layer with ``F.linear`` and 108 ms this way
(one thread, 1,500 rows; `benchmarks/trainer_step.py` measures the whole step). On an Intel Xeon the
two products run alike and the packing only costs, so `learner_projections` packs only where
`verifiers.inference.engine.product_choice` measures it faster.
`verifiers.inference.engine.projections.PackedProjections` does the same for the engine without autograd.

`learner_projections` packs the weights as they are when it is made, together with their
transposes (for the input's gradient), so one must be made after every optimizer step: the
learner makes one per prompt pass and hands it to the completion pass with the prompt's keys and
values. The query/key/value and gate/up weights are fused by an autograd ``cat``, so each module's
gradient arrives in its own ``.grad`` as with ``F.linear``.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

from verifiers.inference.engine.product_choice import choose
from verifiers.inference.engine.projections import PackedProjections, pack, packed_product, projection_weights

ROWS_HINT = 1024
"""Rows oneDNN is told to expect (a learner pass runs about a thousand tokens or more); any count works."""


class _PackedLinear(torch.autograd.Function):
    """``x @ weight.T + bias`` by oneDNN; backward: ``dy @ weight`` and ``dy.T @ x`` by oneDNN too."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: Tensor, bias: Tensor | None, packed: Tensor,
                packed_t: Tensor) -> Tensor:
        ctx.save_for_backward(x)
        ctx.packed_t = packed_t
        ctx.has_bias = bias is not None
        return packed_product(x, packed, bias)

    @staticmethod
    def backward(ctx: Any, dy: Tensor) -> tuple[Tensor | None, ...]:
        (x,) = ctx.saved_tensors
        rows_dy = dy.reshape(-1, dy.shape[-1])
        dx = packed_product(dy, ctx.packed_t, None) if ctx.needs_input_grad[0] else None
        dw = None
        if ctx.needs_input_grad[1]:  # dy.T @ x, as a product of dy.T by the packed x.T
            rows_x = x.reshape(-1, x.shape[-1])
            dw = packed_product(rows_dy.t(), pack(rows_x.t().contiguous(), rows_dy.shape[1]), None)
        db = rows_dy.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return dx, dw, db, None, None


class _Linear:
    """One (possibly fused) weight: the autograd tensor, its bias, and packed copies of it and its transpose."""

    __slots__ = ("bias", "packed", "packed_t", "weight")

    def __init__(self, weight: Tensor, bias: Tensor | None) -> None:
        self.weight, self.bias = weight, bias
        self.packed = pack(weight, ROWS_HINT)
        self.packed_t = pack(weight.detach().t().contiguous(), ROWS_HINT)

    def apply(self, x: Tensor) -> Tensor:
        return _PackedLinear.apply(x, self.weight, self.bias, self.packed, self.packed_t)


_STEP: weakref.WeakKeyDictionary[Any, dict[bool, PackedProjections]] | None = None
"""Inside `packed_once`: each model's trained weights packed once for all the step's passes (with and
without autograd apart)."""

_FROZEN: weakref.WeakKeyDictionary[Any, tuple[tuple[bool, ...], PackedProjections]] = weakref.WeakKeyDictionary()
"""The packed projections of models whose projection weights are all frozen (LoRA), kept across steps."""


def learner_projections(lm: Any, packed: bool | None = None) -> PackedProjections | None:
    """``lm``'s projections as packed products with autograd, for the forward passes of one optimizer
    step; None where they cannot be packed (`PackedProjections.unavailable`) or, with ``packed`` None
    (the default), are not measured faster on this machine (`product_choice`: on trained weights the
    packing of weights, transposes and activations counts): ``F.linear`` then. ``packed=True`` packs
    wherever it can.

    Trained weights change every step, so they are packed anew for each prompt pass. Frozen ones
    (a LoRA run's base model) are packed once and reused while `PackedProjections.fits` and no
    adapter was merged into them or out of them (peft merges by writing ``.data``, which PyTorch
    does not record): packing SmolLM2-135M's projections and their transposes takes 0.6 s or more
    on 2 cores, a pass. The copy then stays in memory between steps (twice the projection weights).
    """
    if packed is False or PackedProjections.unavailable(lm) is not None:
        return None
    trained = any(w.requires_grad for w in projection_weights(lm))
    if packed is None and not choose(lm, "trained" if trained else "frozen").packed:
        return None
    if trained:
        if _STEP is None:
            return PackedProjections(lm, product=_Linear)
        kept = _STEP.setdefault(lm, {})
        grad = torch.is_grad_enabled()  # a packing made without autograd would give the weights no gradient
        packed = kept.get(grad)
        if packed is None or not packed.fits(lm):
            packed = kept[grad] = PackedProjections(lm, product=_Linear)
        return packed
    merged = tuple(bool(getattr(m, "merged", False)) for m in lm.modules())
    kept = _FROZEN.get(lm)
    if kept is not None and kept[0] == merged and kept[1].fits(lm):
        return kept[1]
    packed = PackedProjections(lm, product=_Linear)
    _FROZEN[lm] = (merged, packed)
    return packed


@contextlib.contextmanager
def packed_once() -> Iterator[None]:
    """The passes inside share one packing of each model's trained weights.

    For the micro-batches of one optimizer step (the learner's loop), whose weights cannot change
    until the optimizer steps after it: without this, each micro-batch's prompt pass would pack them
    again (0.6 s or more a pass for SmolLM2-135M on 2 cores). `PackedProjections.fits` still guards
    each reuse. Learner thread only (the engine never asks for learner projections).
    """
    global _STEP
    outer = _STEP
    _STEP = weakref.WeakKeyDictionary() if outer is None else outer
    try:
        yield
    finally:
        _STEP = outer
