"""The learner's forward pass of a Llama-family model as plain tensor ops, for CPUs.

Why: on a small model the learner's step is mostly per-op work around the matmuls, in forward
and again in backward. transformers' generic forward builds its 4-D mask through the masking
utilities, goes through its ``Cache`` classes, repeats the key/value heads and writes the rotation
with a concatenation and a negation per tensor. This runs the same arithmetic from the model's own
weights with autograd (`verifiers.inference.engine.fast_decode.forward_tokens`, which the engine's prefill
also runs: one boolean mask, grouped-query SDPA, the sign folded into the sine), so gradients reach
the same parameters. Its projections are oneDNN products of packed weights with their own
backward (`packed_linear`, about 2x ``F.linear``'s rate on our machine), packed once per prompt
pass and reused by the completion pass. The decoding step's checks
(`verifiers.inference.engine.fast_decode.why_not`: architecture, float32, CPU, plain ``nn.Linear``
projections, no hooks) decide where it applies, and the learner also keeps transformers' forward
for wrapped models (DDP, PEFT other than LoRA), gradient checkpointing and autocast; a peft LoRA model runs
here too, its updates added to the base products (`verifiers.inference.engine.lora`). Log-probabilities and every
parameter's gradient match transformers' to float32 rounding (``tests/trainers/test_plain_forward.py``
for Llama, Qwen2 and Qwen3; ``test_logprobs_memory.py`` against the full-logits path).

Rows may be left- or right-padded (see `forward_tokens`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from trainers.grpo.learn.packed_linear import learner_projections
from verifiers.inference.engine.fast_decode import forward_tokens
from verifiers.inference.engine.fast_decode import why_not as decoder_why_not
from verifiers.inference.engine.lora import is_lora_model_of, projection_ok, with_lora
from verifiers.inference.engine.projections import Projections


@dataclass
class PlainLayer:
    """One layer's keys and values ``[rows, kv_heads, columns, head_dim]`` (what `kv.select_rows` edits)."""

    keys: Tensor
    values: Tensor


@dataclass
class PlainCache:
    """The prompt pass's keys and values, handed to the completion pass (``.layers`` like a transformers cache),
    and the projections it ran, which the completion pass reuses (the same weights: no repacking)."""

    layers: list[PlainLayer] = field(default_factory=list)
    projections: Projections | None = None


@dataclass
class PlainOutput:
    """What the learner reads from a forward: the last position's logits and the cache."""

    logits: Tensor
    past_key_values: PlainCache


def why_not(model: Any, lm: Any) -> str | None:
    """Why the plain forward cannot stand in for ``model``'s (``lm``: the transformers model inside).

    A peft LoRA model is reproduced (`verifiers.inference.engine.lora`); any other wrapper runs its own forward.
    """
    if model is not lm and not is_lora_model_of(model, lm):
        return f"{type(model).__name__} wraps the model (DDP, or PEFT other than LoRA): its own forward runs"
    if any(bool(getattr(lm, f, False)) for f in ("is_gradient_checkpointing", "is_activation_checkpointing")):
        return "gradient checkpointing"
    if torch.is_autocast_enabled("cpu"):
        return "autocast"
    return decoder_why_not(lm, projection_ok)


def forward(lm: Any, input_ids: Tensor, attention_mask: Tensor, position_ids: Tensor,
            past_key_values: PlainCache | None = None) -> tuple[Tensor, PlainOutput]:
    """``(final hidden states [N, T, H], output)`` of ``lm`` on ``input_ids [N, T]`` after ``past_key_values``.

    ``attention_mask`` is ``[N, P + T]`` (1 = a real token) over the cached columns and the new ones.
    """
    past = past_key_values.layers if past_key_values is not None else []
    proj = past_key_values.projections if past_key_values is not None else with_lora(learner_projections(lm), lm)
    cache = PlainCache(projections=proj)

    def write(i: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        if i < len(past):
            k = torch.cat([past[i].keys, k], dim=2)
            v = torch.cat([past[i].values, v], dim=2)
        cache.layers.append(PlainLayer(k, v))
        return k, v

    hidden = forward_tokens(lm, input_ids, attention_mask, position_ids, write, proj)
    head = lm.lm_head
    return hidden, PlainOutput(logits=F.linear(hidden[:, -1:], head.weight, head.bias), past_key_values=cache)
