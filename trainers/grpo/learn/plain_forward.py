"""The learner's forward pass of a Llama-family model as plain tensor ops, for CPUs.

Why: on a small model the learner's step is mostly per-op work around the matmuls, in forward
and again in backward. transformers' generic forward builds its 4-D mask through the masking
utilities, goes through its ``Cache`` classes, repeats the key/value heads and writes the rotation
with a concatenation and a negation per tensor. This runs the same arithmetic from the model's own
weights with autograd (one boolean mask, grouped-query SDPA, the sign folded into the sine), so
gradients reach the same parameters. The decoding step's checks
(`verifiers.inference.fast_decode.why_not`: architecture, float32, CPU, plain ``nn.Linear``
projections, no hooks) decide where it applies, and the learner also keeps transformers' forward
for wrapped models (DDP, PEFT), gradient checkpointing and autocast. Log-probabilities and every
parameter's gradient match transformers' to float32 rounding (``tests/trainers/test_plain_forward.py``
for Llama, Qwen2 and Qwen3; ``test_logprobs_memory.py`` against the full-logits path).

Rows may be left- or right-padded: a padding query attends to itself only (its output is never
trained on), and padding keys are masked for every real query, as in transformers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from verifiers.inference.fast_decode import rms_norm
from verifiers.inference.fast_decode import why_not as decoder_why_not


@dataclass
class PlainLayer:
    """One layer's keys and values ``[rows, kv_heads, columns, head_dim]`` (what `kv.select_rows` edits)."""

    keys: Tensor
    values: Tensor


@dataclass
class PlainCache:
    """The prompt pass's keys and values, handed to the completion pass (``.layers`` like a transformers cache)."""

    layers: list[PlainLayer] = field(default_factory=list)


@dataclass
class PlainOutput:
    """What the learner reads from a forward: the last position's logits and the cache."""

    logits: Tensor
    past_key_values: PlainCache


def why_not(model: Any, lm: Any) -> str | None:
    """Why the plain forward cannot stand in for ``model``'s (``lm``: the transformers model inside)."""
    if model is not lm:
        return f"{type(model).__name__} wraps the model (DDP or PEFT): its own forward runs"
    if any(bool(getattr(lm, f, False)) for f in ("is_gradient_checkpointing", "is_activation_checkpointing")):
        return "gradient checkpointing"
    if torch.is_autocast_enabled("cpu"):
        return "autocast"
    return decoder_why_not(lm)


def forward(lm: Any, input_ids: Tensor, attention_mask: Tensor, position_ids: Tensor,
            past_key_values: PlainCache | None = None) -> tuple[Tensor, PlainOutput]:
    """``(final hidden states [N, T, H], output)`` of ``lm`` on ``input_ids [N, T]`` after ``past_key_values``.

    ``attention_mask`` is ``[N, P + T]`` (1 = a real token) over the cached columns and the new ones.
    """
    inner = lm.model
    cfg = lm.config
    heads = int(cfg.num_attention_heads)
    kv_heads = int(getattr(cfg, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // heads)
    half = head_dim // 2
    rows, width = input_ids.shape
    past = past_key_values.layers if past_key_values is not None else []
    cached = attention_mask.shape[1] - width

    emb = inner.embed_tokens
    h = F.embedding(input_ids, emb.weight, emb.padding_idx)
    cos, sin = inner.rotary_emb(h, position_ids)  # [N, T, D]: rope type and attention scaling included
    cos = cos.unsqueeze(2)
    sin = torch.cat([-sin[..., :half], sin[..., half:]], -1).unsqueeze(2)  # rotate_half's sign, folded in

    def rotate(t: Tensor) -> Tensor:  # t: [N, T, heads, D]
        return t * cos + torch.cat([t[..., half:], t[..., :half]], -1) * sin

    real = attention_mask.to(torch.bool)
    causal = torch.ones(width, width, dtype=torch.bool, device=h.device).tril()
    own = torch.eye(width, dtype=torch.bool, device=h.device)  # a padding query sees itself: no all-masked row
    allowed = torch.cat([real[:, None, :cached].expand(rows, width, cached),
                         (causal & real[:, None, cached:]) | own], dim=2)
    allowed = allowed.unsqueeze(1)  # [N, 1, T, P + T], one mask for every head

    cache = PlainCache()
    for i, layer in enumerate(inner.layers):
        attn, mlp = layer.self_attn, layer.mlp
        x = rms_norm(h, layer.input_layernorm)
        q = F.linear(x, attn.q_proj.weight, attn.q_proj.bias).view(rows, width, heads, head_dim)
        k = F.linear(x, attn.k_proj.weight, attn.k_proj.bias).view(rows, width, kv_heads, head_dim)
        v = F.linear(x, attn.v_proj.weight, attn.v_proj.bias).view(rows, width, kv_heads, head_dim)
        if getattr(attn, "q_norm", None) is not None:
            q, k = rms_norm(q, attn.q_norm), rms_norm(k, attn.k_norm)
        q, k, v = rotate(q).transpose(1, 2), rotate(k).transpose(1, 2), v.transpose(1, 2)
        if i < len(past):
            k = torch.cat([past[i].keys, k], dim=2)
            v = torch.cat([past[i].values, v], dim=2)
        cache.layers.append(PlainLayer(k, v))
        # SDPA's fused kernel: at long rows (an SFT warm-up's whole episodes) explicit [T, P + T]
        # score matrices cost more than all the per-op work this module saves
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=attn.scaling, enable_gqa=True)
        out = out.transpose(1, 2).reshape(rows, width, -1)
        h = h + F.linear(out, attn.o_proj.weight, attn.o_proj.bias)
        x = rms_norm(h, layer.post_attention_layernorm)
        gate = F.silu(F.linear(x, mlp.gate_proj.weight, mlp.gate_proj.bias))
        h = h + F.linear(gate * F.linear(x, mlp.up_proj.weight, mlp.up_proj.bias), mlp.down_proj.weight,
                         mlp.down_proj.bias)
    hidden = rms_norm(h, inner.norm)
    head = lm.lm_head
    return hidden, PlainOutput(logits=F.linear(hidden[:, -1:], head.weight, head.bias), past_key_values=cache)
