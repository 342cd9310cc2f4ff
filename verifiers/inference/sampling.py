"""Per-request sampling parameters and the batched logits → token step.

Each row of a decoding batch may belong to a different request with its own
temperature, top-k/top-p/min-p, repetition penalty and seed, so the processing is
vectorised over rows. Seeded rows draw with the Gumbel-max trick from noise that is a
pure function of (seed, choice index, token position, vocabulary id), computed for all
seeded rows at once with an integer hash: a seeded sample does not depend on what else
shares the batch, and a trainer that seeds every sample pays no per-row sampling cost.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

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
    seed: int | None = None
    stream: int = 0  # choice index within its request, so n seeded choices differ
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


_MASK64 = (1 << 64) - 1


def _to_signed(x: int) -> int:
    x &= _MASK64
    return x - (1 << 64) if x >= 1 << 63 else x


_GOLDEN = _to_signed(0x9E3779B97F4A7C15)
_MIX1 = _to_signed(0xBF58476D1CE4E5B9)
_MIX2 = _to_signed(0x94D049BB133111EB)


def _shr(x: torch.Tensor, k: int) -> torch.Tensor:
    """Logical right shift of int64 (torch's ``>>`` is arithmetic)."""
    return (x >> k) & ((1 << (64 - k)) - 1)


def hashed_uniform(keys: torch.Tensor, vocab: int) -> torch.Tensor:
    """``[B, vocab]`` uniforms in (0, 1): splitmix64 of ``key * 2^20 + token id`` per row.

    Integer overflow wraps in two's complement, which is what the hash wants.
    """
    import torch

    ids = torch.arange(vocab, dtype=torch.int64, device=keys.device)
    x = keys.unsqueeze(1) * (1 << 20) + ids.unsqueeze(0) + _GOLDEN
    x = (x ^ _shr(x, 30)) * _MIX1
    x = (x ^ _shr(x, 27)) * _MIX2
    x = x ^ _shr(x, 31)
    return (_shr(x, 11).to(torch.float64) + 0.5) / float(1 << 53)


def sample(
    processed: torch.Tensor,
    rows: list[RowSampling],
    generator: torch.Generator | None,
    positions: list[int] | None = None,
) -> torch.Tensor:
    """One token id per row: argmax for temperature 0, else a draw from softmax(processed).

    ``positions`` (tokens generated so far per row) key the seeded rows' noise.
    """
    import torch

    out = torch.argmax(processed, dim=1)
    free = [i for i, r in enumerate(rows) if r.temperature > 0 and r.seed is None]
    if free:
        idx = torch.tensor(free, device=processed.device)
        probs = torch.softmax(processed.index_select(0, idx), dim=1)
        out[idx] = torch.multinomial(probs, 1, generator=generator).squeeze(1)
    seeded = [i for i, r in enumerate(rows) if r.temperature > 0 and r.seed is not None]
    if seeded:
        pos = positions or [0] * len(rows)
        keys = torch.tensor(
            [_to_signed((rows[i].seed or 0) * 1_000_003 + rows[i].stream * 65_537 + pos[i]) for i in seeded],
            dtype=torch.int64, device=processed.device,
        )
        u = hashed_uniform(keys, processed.shape[1])
        gumbel = -torch.log(-torch.log(u))
        idx = torch.tensor(seeded, device=processed.device)
        out[idx] = torch.argmax(processed.index_select(0, idx).double() + gumbel, dim=1)
    return out
