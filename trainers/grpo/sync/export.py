"""The policy's weights as an inference server loads them: checkpoint names, LoRA merged, tied head kept.

One function for every transport (checkpoint reload, NCCL broadcast), so the names a server sees
do not depend on how they travel:

- names are Hugging Face checkpoint names (what ``save_pretrained`` writes and vLLM's
  ``load_weights`` maps): wrappers (DDP/accelerate ``module.``, ``torch.compile``'s
  ``_orig_mod.``, peft's ``base_model.model.`` and ``.base_layer``) are stripped;
- a LoRA policy is exported merged, ``W + scaling * B @ A`` per adapted weight, computed
  from the live adapter without copying or changing the model; a module trained in full beside
  the adapters (peft ``modules_to_save``) is exported from its trained copy under its own name;
- a tied output embedding is exported under ``lm_head.weight`` too: ``save_pretrained`` leaves
  it out, but vLLM's in-place (layerwise) reload does not re-tie it, so a server would keep
  its old output layer (the sync probe caught exactly that; see docs/scaling.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

_PREFIXES = ("module.", "_orig_mod.", "base_model.model.")


def _clean(name: str) -> str:
    changed = True
    while changed:
        changed = False
        for p in _PREFIXES:
            if name.startswith(p):
                name = name[len(p):]
                changed = True
    return name.replace(".base_layer.", ".").replace("._orig_mod.", ".")


def _unwrap(model: Any) -> Any:
    while hasattr(model, "module") and isinstance(model.module, torch.nn.Module):
        model = model.module
    return getattr(model, "_orig_mod", model)


def _lora_layers(model: Any) -> dict[str, Any]:
    """``{base weight name: LoRA layer}`` for every active LoRA layer (empty without peft)."""
    layers: dict[str, Any] = {}
    for name, module in model.named_modules():
        lora_a = getattr(module, "lora_A", None)
        base = getattr(module, "base_layer", None)
        if lora_a is None or base is None or not hasattr(module, "get_delta_weight"):
            continue
        if getattr(module, "merged", False) or getattr(module, "disable_adapters", False):
            continue
        if any(a in lora_a for a in getattr(module, "active_adapters", [])):
            layers[_clean(name) + ".weight"] = module
    return layers


def _saved_module_names(model: Any) -> dict[str, str | None]:
    """``{state-dict prefix: clean prefix or None}`` for the copies inside peft ``modules_to_save``
    wrappers: the active copy (the trained one, or the original while adapters are off) is exported
    under the wrapped module's own name, the other copies not at all (None)."""
    names: dict[str, str | None] = {}
    for name, module in model.named_modules():
        saved = getattr(module, "modules_to_save", None)
        original = getattr(module, "original_module", None)
        if not isinstance(saved, torch.nn.ModuleDict) or original is None:
            continue
        active = [a for a in getattr(module, "active_adapters", []) if a in saved]
        use = None if getattr(module, "disable_adapters", False) or not active else active[0]
        target = _clean(name + ".x")[:-1]  # the wrapped module's checkpoint prefix, with its dot
        names[f"{name}.original_module."] = target if use is None else None
        for a in saved:
            names[f"{name}.modules_to_save.{a}."] = target if a == use else None
    return names


def _rename_saved(raw: str, saved: dict[str, str | None]) -> str | None:
    """``raw`` with a ``modules_to_save`` wrapper's copy prefix replaced (None: not exported)."""
    for prefix, target in saved.items():
        if raw.startswith(prefix):
            return None if target is None else target + raw[len(prefix):]
    return _clean(raw)


@torch.no_grad()
def _delta(module: Any) -> torch.Tensor:
    """``scaling * B @ A`` summed over the layer's active adapters."""
    deltas = [module.get_delta_weight(a) for a in module.active_adapters if a in module.lora_A]
    return torch.stack(deltas).sum(0) if len(deltas) > 1 else deltas[0]


def export_weights(model: Any, *, include_tied: bool = True) -> list[tuple[str, torch.Tensor]]:
    """``[(checkpoint name, tensor)]`` in state-dict order, detached and contiguous (see module doc)."""
    return list(iter_export_weights(model, include_tied=include_tied))


def iter_export_weights(model: Any, *, include_tied: bool = True) -> Iterator[tuple[str, torch.Tensor]]:
    """`export_weights` one tensor at a time, each merged LoRA weight computed when it is reached.

    A consumer that moves each tensor elsewhere (to the CPU, a file) before taking the next holds
    at most one merged weight on the device, never a merged copy of the model.
    """
    model = _unwrap(model)
    config = getattr(model, "config", None)
    tied = bool(getattr(config, "tie_word_embeddings", False))
    adapted = _lora_layers(model)
    saved = _saved_module_names(model)
    seen: set[str] = set()
    for raw, tensor in model.state_dict().items():
        if "lora_" in raw or raw.endswith(".lora_magnitude_vector"):
            continue
        name = _rename_saved(raw, saved)
        if name is None or name in seen:
            continue
        if tied and not include_tied and name == "lm_head.weight":
            continue
        seen.add(name)
        t = tensor.detach()
        if tied and name == "lm_head.weight":
            t = t.clone()  # its own storage: checkpoint writers refuse tensors that share memory
        if name in adapted:
            with torch.no_grad():
                t = t + _delta(adapted[name]).to(t.dtype)
        yield name, t.contiguous()
