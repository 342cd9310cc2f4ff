"""Grouped-query attention without copying the KV cache, for the serving engine.

With a padding mask, transformers' SDPA path expands every layer's cached keys and values to
the full number of query heads (``repeat_kv``) before each attention call, because masked GQA
falls back to a slow kernel on CUDA. On a CPU, PyTorch's SDPA takes ``enable_gqa=True`` with a
mask and gives the same numbers without the copy. While decoding a batch of 64 rows on a 25M
Llama (8 heads, 4 KV heads) that copy was about a fifth of the engine's time (py-spy), and
switching it off raised vf-serve's throughput on that model from 0.69x to 0.92x vLLM's
(``benchmarks/serve_vs_vllm.py``).

`use_gqa_attention(model)` switches a model the engine owns to this function; it is a no-op
on other devices and on models without grouped KV heads, and the outputs are the same (tested).
"""

from __future__ import annotations

from typing import Any

NAME = "vf_gqa_sdpa"


def gqa_sdpa_attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, dropout: float = 0.0,
                       scaling: float | None = None, is_causal: bool | None = None, **kwargs: Any) -> tuple[Any, None]:
    """Same contract as transformers' ``sdpa_attention_forward`` (inputs ``[b, h, s, d]``, output ``[b, s, h, d]``)."""
    import torch

    groups = int(getattr(module, "num_key_value_groups", 1))
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    causal = bool(query.shape[2] > 1 and attention_mask is None and causal)
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, is_causal=causal,
        enable_gqa=groups > 1,
    )
    return out.transpose(1, 2).contiguous(), None


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(NAME, gqa_sdpa_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)


def use_gqa_attention(model: Any) -> bool:
    """Switch ``model`` to `gqa_sdpa_attention` when it helps (CPU, grouped KV heads, SDPA); True if switched."""
    cfg = getattr(model, "config", None)
    heads = getattr(cfg, "num_attention_heads", None)
    kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
    device = next(model.parameters()).device
    if device.type != "cpu" or not heads or kv_heads >= heads or getattr(cfg, "_attn_implementation", None) != "sdpa":
        return False
    _register()
    model.set_attn_implementation(NAME)
    return True
