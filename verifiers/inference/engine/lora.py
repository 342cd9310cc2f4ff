"""LoRA on the plain forward (the learner's and the engine's): peft's low-rank updates added to the base
projections' products.

Why: a peft-wrapped model used to leave the plain forward for transformers' own, because its
projections are peft ``lora.Linear`` layers rather than plain ``nn.Linear`` ones, so a LoRA step paid
the generic forward's per-op work (masks, cache classes, repeated key/value heads) and PyTorch's
float32 ``F.linear`` for the frozen base weights, which are most of its arithmetic. Here the base
projections run as a full fine-tune's do (oneDNN products of packed weights; frozen, so only the
input's gradient is computed through them), and each adapted projection adds
``lora_B(lora_A(dropout(x))) * scaling`` for each active adapter, as ``peft.tuners.lora.Linear.forward``
does, so the adapter weights get peft's gradients (``tests/trainers/test_plain_forward.py``). The
engine's decoding step and prefill (`verifiers.inference.engine.fast_decode.FastDecoder`) run the same
sum without autograd, so a LoRA run samples from its model without transformers' forward either
(``tests/inference/test_fast_decode.py``).

Reproduced: vanilla LoRA on any of the attention and MLP projections, several active adapters,
dropout, merged or disabled adapters (the base weight alone, as peft runs them). Left to peft's own
forward (`projection_ok` refuses; vf-train's start-up line names the reason): LoRA
variants (DoRA and the others peft keeps in ``lora_variant``), an adapted head or embedding, a base
layer that is not a plain ``nn.Linear``, hooks, and a wrapper around the PEFT model (DDP, whose own
forward must run for its gradient synchronisation).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from verifiers.inference.engine.projections import ModuleProjections, Projections, swiglu

if TYPE_CHECKING:
    from torch import Tensor, nn


def _lora_linear_type() -> type | None:
    """peft's LoRA linear layer class, or None where peft is not installed."""
    try:
        from peft.tuners.lora.layer import Linear
    except ImportError:
        return None
    return Linear


def _linear_type() -> type:
    from torch import nn

    return nn.Linear


def _no_hooks(module: nn.Module) -> bool:
    return not (module._forward_hooks or module._forward_pre_hooks)


def is_lora_model_of(model: Any, lm: Any) -> bool:
    """``model`` is a peft ``PeftModel`` of LoRA adapters only, whose base model is ``lm`` itself (no
    wrapper in between). Other peft methods are refused here: prompt tuning, for one, changes the
    inputs while leaving every projection a plain ``nn.Linear``."""
    try:
        from peft import PeftModel
    except ImportError:
        return False
    if not isinstance(model, PeftModel) or model.get_base_model() is not lm:
        return False
    return all(str(getattr(cfg.peft_type, "value", cfg.peft_type)) == "LORA" for cfg in model.peft_config.values())


def lora_base(model: Any) -> Any | None:
    """The transformers model inside ``model`` when ``model`` is a peft LoRA model of it with nothing in
    between (what the engine decodes in a LoRA run), else None. peft is not imported for it: a peft
    model cannot exist before peft is."""
    if "peft" not in sys.modules or not callable(getattr(model, "get_base_model", None)):
        return None
    lm = model.get_base_model()
    return lm if is_lora_model_of(model, lm) else None


def _adapters(module: Any) -> list[str]:
    """The adapters whose updates ``module``'s forward adds (none when disabled or merged into the base)."""
    if module.disable_adapters or module.merged:
        return []
    return [a for a in module.active_adapters if a in module.lora_A]


def projection_ok(module: Any) -> bool:
    """A projection the plain forward reproduces: a plain ``nn.Linear``, or a vanilla LoRA layer on one."""
    linear = _linear_type()
    if type(module) is linear:
        return _no_hooks(module)
    lora_linear = _lora_linear_type()
    if lora_linear is None or type(module) is not lora_linear or not _no_hooks(module):
        return False
    base = module.base_layer
    if type(base) is not linear or not _no_hooks(base):
        return False
    active = _adapters(module)
    return not any(a in module.lora_variant for a in active) and all(
        type(m) is linear and _no_hooks(m) for a in active for m in (module.lora_A[a], module.lora_B[a]))


@dataclass(frozen=True, slots=True)
class _Update:
    """One active adapter of one projection: ``b(a(dropout(x))) * scaling``."""

    a: nn.Module
    b: nn.Module
    dropout: nn.Module
    scaling: float

    def __call__(self, x: Tensor) -> Tensor:
        return self.b(self.a(self.dropout(x))) * self.scaling


def _updates(module: Any) -> list[_Update]:
    if type(module) is _linear_type():
        return []
    return [_Update(module.lora_A[a], module.lora_B[a], module.lora_dropout[a], float(module.scaling[a]))
            for a in _adapters(module)]


def _add(y: Tensor, updates: list[_Update], x: Tensor) -> Tensor:
    for update in updates:
        y = y + update(x)
    return y


def with_lora(base: Projections | None, lm: Any) -> Projections | None:
    """``base`` (None: the modules' own products) with ``lm``'s LoRA updates added, or ``base`` itself
    where no projection of ``lm`` has an active adapter."""
    lora = LoraProjections(base or ModuleProjections(lm), lm)
    return lora if any(any(u.values()) for u in lora.layers) else base


class LoraProjections:
    """``base``'s products (the frozen weights) plus each adapted projection's LoRA updates.

    The updates are read from the modules when this is made (one per prompt pass, as the packed
    base projections are), and call the adapter modules themselves, so autograd reaches them.
    """

    def __init__(self, base: Projections, lm: Any) -> None:
        self.base = base
        self.layers = [
            {name: _updates(getattr(owner, name))
             for owner, names in ((layer.self_attn, ("q_proj", "k_proj", "v_proj", "o_proj")),
                                  (layer.mlp, ("gate_proj", "up_proj", "down_proj")))
             for name in names}
            for layer in lm.model.layers]

    def qkv(self, layer: int, x: Any) -> tuple[Any, Any, Any]:
        u = self.layers[layer]
        q, k, v = self.base.qkv(layer, x)
        return _add(q, u["q_proj"], x), _add(k, u["k_proj"], x), _add(v, u["v_proj"], x)

    def o(self, layer: int, x: Any) -> Any:
        return _add(self.base.o(layer, x), self.layers[layer]["o_proj"], x)

    def mlp(self, layer: int, x: Any) -> Any:
        return swiglu(self, layer, x)

    def gate_up(self, layer: int, x: Any) -> tuple[Any, Any]:
        u = self.layers[layer]
        gate, up = self.base.gate_up(layer, x)
        return _add(gate, u["gate_proj"], x), _add(up, u["up_proj"], x)

    def down(self, layer: int, x: Any) -> Any:
        return _add(self.base.down(layer, x), self.layers[layer]["down_proj"], x)

    def head(self, x: Any) -> Any:
        return self.base.head(x)
