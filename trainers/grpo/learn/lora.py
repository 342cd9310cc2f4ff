"""The peft ``LoraConfig`` a run asks for, checked against the model before anything is wrapped.

Why a module of its own: the adapter set-up has choices that depend on the model (a tied input and
output embedding must stay tied when either is trained), and mistakes in module names should fail
with a message naming the config key, not deep inside peft.
"""

from __future__ import annotations

from typing import Any

from verifiers.errors import ConfigError


def _matches(name: str, key: str, *, whole: bool = True) -> bool:
    """peft's rules: a ``target_modules`` entry is a dotted suffix of the module's name, a
    ``modules_to_save`` entry (``whole=False``) any suffix ("norm" also matches "input_layernorm")."""
    return name == key or name.endswith("." + key) or (not whole and name.endswith(key))


def _module_name(model: Any, module: Any) -> str | None:
    for name, m in model.named_modules():
        if m is module:
            return name
    return None


def touches_tied_embedding(model: Any, keys: list[str]) -> bool:
    """Whether ``keys`` name the input or output embedding of a model whose two are tied."""
    if not getattr(model.config, "tie_word_embeddings", False):
        return False
    getters = ("get_input_embeddings", "get_output_embeddings")
    names = [_module_name(model, getattr(model, g)()) for g in getters if hasattr(model, g)]
    return any(_matches(n, k, whole=False) for n in names if n is not None for k in keys)


def lora_config(cfg: Any, model: Any) -> Any:
    """The ``LoraConfig`` for ``cfg`` (``lora_*`` keys) on ``model``, after checking the module names.

    ``lora_modules_to_save`` modules are trained in full beside the adapters. When one of them is
    a tied embedding, the trained copy stays tied (peft ``ensure_weight_tying``): otherwise the
    input embedding would move while the output layer kept the base weights, and the merged
    model could not be saved as the tied model it claims to be.
    """
    from peft import LoraConfig

    names = [n for n, _ in model.named_modules()]
    for key_name, whole in (("lora_target_modules", True), ("lora_modules_to_save", False)):
        missing = [k for k in getattr(cfg, key_name) if not any(_matches(n, k, whole=whole) for n in names)]
        if missing:
            leaves = sorted({n.rsplit(".", 1)[-1] for n in names if n})
            raise ConfigError(f"{key_name} names {missing}, which match no module of this model; "
                              f"module names end in: {', '.join(leaves)}")
    if cfg.lora_modules_to_save and cfg.weight_sync == "lora":
        raise ConfigError("weight_sync = 'lora' sends vLLM the adapter only, without the modules trained in full "
                          f"({cfg.lora_modules_to_save}): use weight_sync = 'reload' or 'nccl' (merged weights), "
                          "or empty lora_modules_to_save")
    overlap = set(cfg.lora_target_modules) & set(cfg.lora_modules_to_save)
    if overlap:
        raise ConfigError(f"{sorted(overlap)} is in both lora_target_modules and lora_modules_to_save: "
                          "a module gets an adapter or is trained in full, not both")
    tied = touches_tied_embedding(model, list(cfg.lora_modules_to_save))
    return LoraConfig(
        r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
        target_modules=list(cfg.lora_target_modules), modules_to_save=list(cfg.lora_modules_to_save) or None,
        ensure_weight_tying=tied, task_type="CAUSAL_LM",
    )

