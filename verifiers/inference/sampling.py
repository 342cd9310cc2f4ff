"""Per-request sampling parameters and the batched logits → token step.

Each row of a decoding batch may belong to a different request with its own
temperature, top-k/top-p/min-p, repetition penalty and seed, so the processing is
vectorised over rows where it can be and falls back to per-row work only for seeded
rows (each seeded request owns a ``torch.Generator`` so its samples do not depend on
what else shares the batch).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    import torch


class SamplingParams(BaseModel):
    """What a request asks of the sampler (OpenAI fields plus vLLM's extras)."""

    model_config = ConfigDict(extra="forbid")

    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(-1, ge=-1)
    min_p: float = Field(0.0, ge=0.0, le=1.0)
    repetition_penalty: float = Field(1.0, gt=0.0)
    max_tokens: int | None = Field(None, ge=1)
    min_tokens: int = Field(0, ge=0)
    stop: list[str] = Field(default_factory=list)
    stop_token_ids: list[int] = Field(default_factory=list)
    ignore_eos: bool = False
    seed: int | None = None
    logprobs: bool = False
    top_logprobs: int = Field(0, ge=0, le=20)
    include_stop_str_in_output: bool = False


@dataclass(slots=True)
class RowSampling:
    """Sampling settings of one batch row, resolved once when the row joins."""

    temperature: float
    top_p: float
    top_k: int
    min_p: float
    repetition_penalty: float
    generator: Any = None  # torch.Generator for seeded requests
    seen: set[int] = field(default_factory=set)  # token ids for the repetition penalty


def _apply_repetition_penalty(logits: torch.Tensor, rows: list[RowSampling]) -> None:
    import torch

    for i, r in enumerate(rows):
        if r.repetition_penalty == 1.0 or not r.seen:
            continue
        idx = torch.tensor(sorted(r.seen), dtype=torch.long, device=logits.device)
        vals = logits[i, idx]
        logits[i, idx] = torch.where(vals > 0, vals / r.repetition_penalty, vals * r.repetition_penalty)


def process_logits(logits: torch.Tensor, rows: list[RowSampling]) -> torch.Tensor:
    """Return the filtered, temperature-scaled logits (``-inf`` where a token is excluded).

    Rows with temperature 0 are left unscaled; the caller takes their argmax.
    """
    import torch

    logits = logits.float().clone()
    _apply_repetition_penalty(logits, rows)
    temps = torch.tensor([r.temperature if r.temperature > 0 else 1.0 for r in rows], device=logits.device)
    logits.div_(temps.unsqueeze(1))
    vocab = logits.shape[1]
    top_ks = [r.top_k if 0 < r.top_k < vocab else vocab for r in rows]
    needs_k = any(k < vocab for k in top_ks)
    needs_p = any(r.top_p < 1.0 for r in rows)
    needs_min_p = any(r.min_p > 0.0 for r in rows)
    if needs_k or needs_p:
        sorted_logits, sorted_idx = torch.sort(logits, dim=1, descending=True)
        remove = torch.zeros_like(sorted_logits, dtype=torch.bool)
        if needs_k:
            ks = torch.tensor(top_ks, device=logits.device).unsqueeze(1)
            remove |= torch.arange(vocab, device=logits.device).unsqueeze(0) >= ks
        if needs_p:
            ps = torch.tensor([r.top_p for r in rows], device=logits.device).unsqueeze(1)
            probs = torch.softmax(sorted_logits.masked_fill(remove, float("-inf")), dim=1)
            # Keep the smallest prefix whose mass reaches top_p (the first token is always kept).
            before = torch.cumsum(probs, dim=1) - probs
            remove |= before >= ps
        mask = torch.zeros_like(remove).scatter(1, sorted_idx, remove)
        logits.masked_fill_(mask, float("-inf"))
    if needs_min_p:
        probs = torch.softmax(logits, dim=1)
        min_ps = torch.tensor([r.min_p for r in rows], device=logits.device).unsqueeze(1)
        cutoff = probs.max(dim=1, keepdim=True).values * min_ps
        logits.masked_fill_(probs < cutoff, float("-inf"))
    return logits


def sample(processed: torch.Tensor, rows: list[RowSampling], generator: torch.Generator | None) -> torch.Tensor:
    """One token id per row: argmax for temperature 0, else a draw from softmax(processed)."""
    import torch

    greedy = torch.argmax(processed, dim=1)
    probs = torch.softmax(processed, dim=1)
    out = greedy.clone()
    free = [i for i, r in enumerate(rows) if r.temperature > 0 and r.generator is None]
    if free:
        idx = torch.tensor(free, device=processed.device)
        out[idx] = torch.multinomial(probs[idx], 1, generator=generator).squeeze(1)
    for i, r in enumerate(rows):
        if r.temperature > 0 and r.generator is not None:
            out[i] = torch.multinomial(probs[i], 1, generator=r.generator).squeeze(0)
    return out
