"""The policy's weights as an inference server loads them: checkpoint names, LoRA merged, tied head kept.

One function for every transport (checkpoint reload, NCCL broadcast), so the names a server sees
do not depend on how they travel:

- names are Hugging Face checkpoint names (what ``save_pretrained`` writes and vLLM's
  ``load_weights`` maps): wrappers (DDP/accelerate ``module.``, ``torch.compile``'s
  ``_orig_mod.``, peft's ``base_model.model.`` and ``.base_layer``) are stripped;
- a LoRA policy is exported merged, ``W + scaling * B @ A`` per adapted weight, computed
  from the live adapter without copying or changing the model;
- a tied output embedding is exported under ``lm_head.weight`` too: ``save_pretrained`` leaves
  it out, but vLLM's in-place (layerwise) reload does not re-tie it, so a server would keep
  its old output layer (the sync probe caught exactly that; see docs/scaling.md).
"""

from __future__ import annotations

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


def _lora_deltas(model: Any) -> dict[str, torch.Tensor]:
    """``{base weight name: scaling * B @ A}`` for every active LoRA layer (empty without peft)."""
    deltas: dict[str, torch.Tensor] = {}
    for name, module in model.named_modules():
        lora_a = getattr(module, "lora_A", None)
        base = getattr(module, "base_layer", None)
        if lora_a is None or base is None or not hasattr(module, "get_delta_weight"):
            continue
        if getattr(module, "merged", False) or getattr(module, "disable_adapters", False):
            continue
        delta = None
        for adapter in getattr(module, "active_adapters", []):
            if adapter in lora_a:
                d = module.get_delta_weight(adapter)
                delta = d if delta is None else delta + d
        if delta is not None:
            deltas[_clean(name) + ".weight"] = delta
    return deltas


@torch.no_grad()
def export_weights(model: Any, *, include_tied: bool = True) -> list[tuple[str, torch.Tensor]]:
    """``[(checkpoint name, tensor)]`` in state-dict order, detached and contiguous (see module doc)."""
    model = _unwrap(model)
    deltas = _lora_deltas(model)
    config = getattr(model, "config", None)
    tied = bool(getattr(config, "tie_word_embeddings", False))
    out: list[tuple[str, torch.Tensor]] = []
    seen: set[str] = set()
    for raw, tensor in model.state_dict().items():
        if "lora_" in raw or raw.endswith(".lora_magnitude_vector"):
            continue
        name = _clean(raw)
        if name in seen:
            continue
        if tied and not include_tied and name == "lm_head.weight":
            continue
        seen.add(name)
        t = tensor.detach()
        if tied and name == "lm_head.weight":
            t = t.clone()  # its own storage: checkpoint writers refuse tensors that share memory
        if name in deltas:
            t = t + deltas[name].to(t.dtype)
        out.append((name, t.contiguous()))
    return out
