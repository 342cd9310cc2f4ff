"""The linear projections of a Llama-family model, as the engine's plain forward calls them.

`forward_tokens` and `FastDecoder` (`verifiers.inference.engine.fast_decode`) ask for a layer's query,
key and value projections, its output projection, its MLP and the head through one of these:

- `ModuleProjections` reads each ``nn.Linear``'s weight on every call (``F.linear``), so autograd
  flows through it (the learner) and an edit to the weights is seen at once.
- `PackedProjections` holds copies of the weights packed once into oneDNN's blocked layout, with
  the query/key/value and gate/up weights each fused into one matrix. Why: at the engine's matrix
  shapes (tens of rows, hidden sizes in the hundreds) PyTorch's float32 ``F.linear`` reaches a
  fraction of the machine's matmul rate, and a prepacked oneDNN product of the same arithmetic runs
  2-3x faster (the 25M-parameter model's projections for 64 decoding rows: 18.3 -> 6.9 ms on a
  2-core AVX-512 machine; `benchmarks/fast_decode.py` measures the whole step). vLLM's CPU backend
  does the same (``onednn_mm``). The engine's products are inference only, and a copy:
  `PackedProjections.fits` says whether it still describes the model's weights, and the engine
  repacks when it does not. The learner builds one per optimizer step with products that have a
  backward (`trainers.grpo.learn.packed_linear`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

PACK_MAX_BYTES = 1 << 30
"""Largest total of projection weights packed (1 GiB: ~268M float32 parameters). A packed copy
costs their memory again (the learner's two: the weights and their transposes); above this the
engine and the learner multiply by the modules' own weights."""

ROWS_HINT = 64
"""Rows oneDNN is told to expect when it picks the blocked layout (a GRPO batch, vf-serve's load);
any row count works, this only tunes the layout."""


class Projections(Protocol):
    """A model's projections by layer index; inputs ``[..., in]``, outputs ``[..., out]``."""

    def qkv(self, layer: int, x: Any) -> tuple[Any, Any, Any]: ...
    def o(self, layer: int, x: Any) -> Any: ...
    def mlp(self, layer: int, x: Any) -> Any: ...
    def gate_up(self, layer: int, x: Any) -> tuple[Any, Any]: ...
    def down(self, layer: int, x: Any) -> Any: ...
    def head(self, x: Any) -> Any: ...


def swiglu(proj: Projections, layer: int, x: Any) -> Any:
    """A layer's MLP from its projections' halves: ``down(silu(gate(x)) * up(x))`` (every `Projections` shares it)."""
    import torch.nn.functional as F

    gate, up = proj.gate_up(layer, x)
    return proj.down(layer, F.silu(gate) * up)


class ModuleProjections:
    """``F.linear`` of each module's current weight (autograd-capable, always up to date)."""

    def __init__(self, lm: Any) -> None:
        self.layers = lm.model.layers
        self.lm_head = lm.lm_head

    def qkv(self, layer: int, x: Any) -> tuple[Any, Any, Any]:
        a = self.layers[layer].self_attn
        return _linear(x, a.q_proj), _linear(x, a.k_proj), _linear(x, a.v_proj)

    def o(self, layer: int, x: Any) -> Any:
        return _linear(x, self.layers[layer].self_attn.o_proj)

    def mlp(self, layer: int, x: Any) -> Any:
        return swiglu(self, layer, x)

    def gate_up(self, layer: int, x: Any) -> tuple[Any, Any]:
        m = self.layers[layer].mlp
        return _linear(x, m.gate_proj), _linear(x, m.up_proj)

    def down(self, layer: int, x: Any) -> Any:
        return _linear(x, self.layers[layer].mlp.down_proj)

    def head(self, x: Any) -> Any:
        return _linear(x, self.lm_head)


class Product(Protocol):
    """One (possibly fused) projection's product: ``apply(x) = x @ weight.T + bias``."""

    def apply(self, x: Any) -> Any: ...


class PackedProjections:
    """oneDNN-packed copies of the projections (query/key/value fused, gate/up fused).

    ``product(weight, bias)`` makes each projection's `Product` from the fused weight and bias (by
    default `_Packed`, inference only: build it inside ``torch.inference_mode()`` or
    ``torch.no_grad()``; the learner passes one with a backward, and builds this with autograd on,
    so the fusing ``cat`` hands each module its own gradient). The head is packed on its first use
    (the learner applies it itself, in chunks). `fits` tells whether the model's weight tensors are
    still the ones packed (same storage, no in-place write recorded).
    """

    def __init__(self, lm: Any, product: Callable[[Any, Any], Product] | None = None) -> None:
        import torch

        make = product or _pack
        self._stamp = _stamp(projection_weights(lm))
        self._make = make
        self._lm_head = lm.lm_head
        self._head: Product | None = None
        self.layers: list[_Layer] = []
        for layer in lm.model.layers:
            a, m = layer.self_attn, layer.mlp
            q, k, gate = a.q_proj, a.k_proj, m.gate_proj
            self.layers.append(_Layer(
                qkv=make(torch.cat([q.weight, k.weight, a.v_proj.weight]), _cat_bias((q, k, a.v_proj))),
                q_end=q.out_features, k_end=q.out_features + k.out_features,
                o=make(a.o_proj.weight, a.o_proj.bias),
                gate_up=make(torch.cat([gate.weight, m.up_proj.weight]), _cat_bias((gate, m.up_proj))),
                gate_end=gate.out_features,
                down=make(m.down_proj.weight, m.down_proj.bias)))

    @staticmethod
    def unavailable(lm: Any) -> str | None:
        """Why the projections cannot be packed (not on a CPU, no oneDNN, too large), or None when they can."""
        device = lm.lm_head.weight.device.type
        if device != "cpu":
            return f"weights on {device} (oneDNN packing is for CPUs; the GPU multiplies the weights as they are)"
        problem = _onednn_problem()
        if problem is not None:
            return problem
        size = sum(w.numel() * w.element_size() for w in projection_weights(lm))
        if size > PACK_MAX_BYTES:
            return f"projection weights of {size / 2**30:.1f} GiB (packing copies them; the limit is 1 GiB)"
        return None

    def fits(self, lm: Any) -> bool:
        """Whether ``lm``'s projection weights are still the tensors packed, unmodified as far as
        PyTorch records (a write through ``.data`` or a fused optimizer is not recorded: after such
        an edit, the engine's `paused` or `bump_version` is what marks the weights changed)."""
        return _stamp(projection_weights(lm)) == self._stamp

    def qkv(self, layer: int, x: Any) -> tuple[Any, Any, Any]:
        p = self.layers[layer]
        out = p.qkv.apply(x)
        return out[..., :p.q_end], out[..., p.q_end:p.k_end], out[..., p.k_end:]

    def o(self, layer: int, x: Any) -> Any:
        return self.layers[layer].o.apply(x)

    def mlp(self, layer: int, x: Any) -> Any:
        return swiglu(self, layer, x)

    def gate_up(self, layer: int, x: Any) -> tuple[Any, Any]:
        p = self.layers[layer]
        both = p.gate_up.apply(x)
        return both[..., :p.gate_end], both[..., p.gate_end:]

    def down(self, layer: int, x: Any) -> Any:
        return self.layers[layer].down.apply(x)

    def head(self, x: Any) -> Any:
        if self._head is None:
            self._head = self._make(self._lm_head.weight, self._lm_head.bias)
        return self._head.apply(x)


@dataclass(frozen=True, slots=True)
class _Layer:
    """One decoder layer's packed projections; ``q_end``, ``k_end``, ``gate_end`` split the fused outputs."""

    qkv: Product
    q_end: int
    k_end: int
    o: Product
    gate_up: Product
    gate_end: int
    down: Product


class _Packed:
    """One packed weight and its bias."""

    __slots__ = ("bias", "weight")

    def __init__(self, weight: Any, bias: Any) -> None:
        self.weight, self.bias = weight, bias

    def apply(self, x: Any) -> Any:
        return packed_product(x, self.weight, self.bias)


def pack(weight: Any, rows_hint: int) -> Any:
    """``weight [out, in]`` reordered into oneDNN's blocked layout for products of about ``rows_hint`` rows."""
    import torch

    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), rows_hint)


def packed_product(x: Any, packed: Any, bias: Any) -> Any:
    """``x @ weight.T + bias`` by oneDNN, ``packed`` being `pack` of ``weight``."""
    import torch

    return torch.ops.mkldnn._linear_pointwise(x.contiguous(), packed, bias, "none", [], "")


@functools.cache
def _onednn_problem() -> str | None:
    """Why this process's PyTorch cannot run packed products, or None (checked once: it cannot change)."""
    import torch

    if not torch.backends.mkldnn.is_available():
        return "this PyTorch build has no oneDNN (mkldnn)"
    try:
        with torch.no_grad():
            packed_product(torch.ones(2, 16), pack(torch.ones(16, 16), ROWS_HINT), None)
    except (RuntimeError, AttributeError) as exc:  # an op missing from this build, or refused by it
        return f"oneDNN's packed linear is not usable here ({type(exc).__name__}: {exc})"
    return None


def _pack(weight: Any, bias: Any) -> _Packed:
    """The inference `Product`: ``weight`` packed, ``bias`` copied (neither tracked by autograd)."""
    return _Packed(pack(weight, ROWS_HINT), None if bias is None else bias.detach().clone())


def _cat_bias(linears: tuple[Any, ...]) -> Any:
    """The fused projection's bias: the parts' biases joined (zeros for a part without one), or None."""
    import torch

    if all(p.bias is None for p in linears):
        return None
    return torch.cat([p.bias if p.bias is not None else p.weight.new_zeros(p.out_features) for p in linears])


def projection_weights(lm: Any) -> list[Any]:
    """Every tensor the packed copy is made from, in a fixed order."""
    out = []
    for layer in lm.model.layers:
        a, m = layer.self_attn, layer.mlp
        for p in (a.q_proj, a.k_proj, a.v_proj, a.o_proj, m.gate_proj, m.up_proj, m.down_proj):
            out.append(p.weight)
            if p.bias is not None:
                out.append(p.bias)
    out.append(lm.lm_head.weight)
    if lm.lm_head.bias is not None:
        out.append(lm.lm_head.bias)
    return out


def _stamp(tensors: list[Any]) -> tuple[tuple[int, int], ...]:
    """Storage address and in-place write counter of each tensor: unchanged while the weights are."""
    return tuple((t.data_ptr(), t._version) for t in tensors)


def _linear(x: Any, linear: Any) -> Any:
    import torch.nn.functional as F

    return F.linear(x, linear.weight, linear.bias)
