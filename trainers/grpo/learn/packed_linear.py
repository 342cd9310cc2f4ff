"""The learner's projections as oneDNN products of packed weights, with autograd.

Why: PyTorch's float32 ``F.linear`` and its backward reach 105-115 GFLOP/s a thread on our
development machine (an AMD EPYC with AVX-512, where MKL's products run well below the chip's
rate), while oneDNN's product of a prepacked weight reaches 250-270: the forward, the input's
gradient and the weight's gradient of the 25M-parameter model's projections took 237 ms a layer
with ``F.linear`` and 108 ms this way (one thread, 1,500 rows; `benchmarks/trainer_step.py`
measures the whole step). `verifiers.inference.projections.PackedProjections` does the same for
the engine without autograd.

`LearnerProjections` packs the weights as they are when it is made, together with their
transposes (for the input's gradient), so one must be made after every optimizer step: the
learner makes one per prompt pass and hands it to the completion pass with the prompt's keys and
values. The query/key/value and gate/up weights are fused by an autograd ``cat``, so each module's
gradient arrives in its own ``.grad`` as with ``F.linear``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from verifiers.inference.projections import PackedProjections

ROWS_HINT = 1024
"""Rows oneDNN is told to expect (a learner pass runs about a thousand tokens or more); any count works."""


def unavailable(lm: Any) -> str | None:
    """Why the learner's projections cannot run packed (see `PackedProjections.unavailable`)."""
    return PackedProjections.unavailable(lm)


class _PackedLinear(torch.autograd.Function):
    """``x @ weight.T + bias`` by oneDNN; backward: ``dy @ weight`` and ``dy.T @ x`` by oneDNN too."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: Tensor, bias: Tensor | None, packed: Tensor,
                packed_t: Tensor) -> Tensor:
        ctx.save_for_backward(x)
        ctx.packed_t = packed_t
        ctx.has_bias = bias is not None
        return _product(x, packed, bias)

    @staticmethod
    def backward(ctx: Any, dy: Tensor) -> tuple[Tensor | None, ...]:
        (x,) = ctx.saved_tensors
        rows_dy = dy.reshape(-1, dy.shape[-1])
        dx = _product(dy, ctx.packed_t, None) if ctx.needs_input_grad[0] else None
        dw = None
        if ctx.needs_input_grad[1]:  # dy.T @ x, as a product of dy.T by the packed x.T
            rows_x = x.reshape(-1, x.shape[-1])
            packed_x = torch.ops.mkldnn._reorder_linear_weight(rows_x.t().contiguous(), rows_dy.shape[1])
            dw = _product(rows_dy.t().contiguous(), packed_x, None)
        db = rows_dy.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return dx, dw, db, None, None


def _product(x: Tensor, packed: Tensor, bias: Tensor | None) -> Tensor:
    return torch.ops.mkldnn._linear_pointwise(x.contiguous(), packed, bias, "none", [], "")


class _Linear:
    """One (possibly fused) weight: the autograd tensor, its bias, and packed copies of it and its transpose."""

    __slots__ = ("bias", "packed", "packed_t", "weight")

    def __init__(self, weight: Tensor, bias: Tensor | None) -> None:
        self.weight, self.bias = weight, bias
        w = weight.detach()
        self.packed = torch.ops.mkldnn._reorder_linear_weight(w, ROWS_HINT)
        self.packed_t = torch.ops.mkldnn._reorder_linear_weight(w.t().contiguous(), ROWS_HINT)

    def __call__(self, x: Tensor) -> Tensor:
        return _PackedLinear.apply(x, self.weight, self.bias, self.packed, self.packed_t)


def _fused(linears: tuple[Any, ...]) -> _Linear:
    weight = torch.cat([p.weight for p in linears])
    bias = None
    if any(p.bias is not None for p in linears):
        bias = torch.cat([p.bias if p.bias is not None else p.weight.new_zeros(p.out_features) for p in linears])
    return _Linear(weight, bias)


@dataclass(frozen=True, slots=True)
class _Layer:
    qkv: _Linear
    q_end: int
    k_end: int
    o: _Linear
    gate_up: _Linear
    gate_end: int
    down: _Linear


class LearnerProjections:
    """A model's projections for one optimizer step's forward passes (see the module docstring)."""

    def __init__(self, lm: Any) -> None:
        self.layers = []
        for layer in lm.model.layers:
            a, m = layer.self_attn, layer.mlp
            self.layers.append(_Layer(
                qkv=_fused((a.q_proj, a.k_proj, a.v_proj)), q_end=a.q_proj.out_features,
                k_end=a.q_proj.out_features + a.k_proj.out_features, o=_Linear(a.o_proj.weight, a.o_proj.bias),
                gate_up=_fused((m.gate_proj, m.up_proj)), gate_end=m.gate_proj.out_features,
                down=_Linear(m.down_proj.weight, m.down_proj.bias)))
        self.lm_head = lm.lm_head  # the learner's log-probabilities apply the head themselves, in chunks

    def qkv(self, layer: int, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        p = self.layers[layer]
        out = p.qkv(x)
        return out[..., :p.q_end], out[..., p.q_end:p.k_end], out[..., p.k_end:]

    def o(self, layer: int, x: Tensor) -> Tensor:
        return self.layers[layer].o(x)

    def mlp(self, layer: int, x: Tensor) -> Tensor:
        p = self.layers[layer]
        both = p.gate_up(x)
        return p.down(torch.nn.functional.silu(both[..., :p.gate_end]) * both[..., p.gate_end:])

    def head(self, x: Tensor) -> Tensor:
        return torch.nn.functional.linear(x, self.lm_head.weight, self.lm_head.bias)
