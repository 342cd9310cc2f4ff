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


@dataclass(slots=True)
class BatchParams:
    """The sampling parameters of a whole batch as device tensors (one entry per row).

    The engine keeps these columns in a `RowTable` written once when a row joins, so a decoding step
    builds no Python lists and copies nothing to the device. The ``needs_*`` flags and index tensors
    are host-side facts about the batch's composition, recomputed only when rows join or leave.
    """

    temperature: torch.Tensor  # float32; 1.0 for greedy rows (they take the argmax anyway)
    top_k: torch.Tensor  # int64; vocab size where top-k is off
    top_p: torch.Tensor  # float32
    min_p: torch.Tensor  # float32
    penalty: torch.Tensor  # float32 repetition penalty
    seen: torch.Tensor | None = None  # [B, V] bool: prompt + generated tokens (repetition penalty)
    needs_k: bool = False
    needs_p: bool = False
    needs_min_p: bool = False
    needs_penalty: bool = False
    free_idx: torch.Tensor | None = None  # rows sampled from the engine's generator
    seeded_idx: torch.Tensor | None = None  # rows sampled with hashed Gumbel noise
    seed_keys: torch.Tensor | None = None  # int64 per seeded row: f(seed, choice index)


def row_values(r: RowSampling, vocab: int) -> dict[str, float | int]:
    """One row's entries of the `BatchParams` columns."""
    return {
        "temperature": r.temperature if r.temperature > 0 else 1.0,
        "top_k": r.top_k if 0 < r.top_k < vocab else vocab,
        "top_p": r.top_p,
        "min_p": r.min_p,
        "penalty": r.repetition_penalty,
    }


def seed_key(r: RowSampling) -> int:
    """The row's noise key before adding the token position (see `sample`)."""
    return _to_signed((r.seed or 0) * 1_000_003 + r.stream * 65_537)


def batch_params(rows: list[RowSampling], vocab: int, device: torch.device) -> BatchParams:
    """`BatchParams` from `RowSampling` objects (tests and one-off callers; the engine keeps its own)."""
    import torch

    vals = [row_values(r, vocab) for r in rows]

    def col(name: str, dtype: torch.dtype) -> torch.Tensor:
        return torch.tensor([v[name] for v in vals], dtype=dtype, device=device)

    seen = None
    if any(r.repetition_penalty != 1.0 and r.seen for r in rows):
        seen = torch.zeros(len(rows), vocab, dtype=torch.bool, device=device)
        for i, r in enumerate(rows):
            if r.seen:
                seen[i, torch.tensor(sorted(r.seen), dtype=torch.long, device=device)] = True
    seeded = [i for i, r in enumerate(rows) if r.temperature > 0 and r.seed is not None]
    keys = torch.tensor([seed_key(rows[i]) for i in seeded], dtype=torch.int64, device=device) if seeded else None
    return BatchParams(
        temperature=col("temperature", torch.float32), top_k=col("top_k", torch.int64),
        top_p=col("top_p", torch.float32), min_p=col("min_p", torch.float32), penalty=col("penalty", torch.float32),
        seen=seen, seed_keys=keys, **composition(rows, vocab, device),  # type: ignore[arg-type]
    )


def composition(rows: list[RowSampling], vocab: int, device: torch.device) -> dict[str, object]:
    """The host-side flags and row index tensors of a batch (recomputed when rows join or leave)."""
    import torch

    free = [i for i, r in enumerate(rows) if r.temperature > 0 and r.seed is None]
    seeded = [i for i, r in enumerate(rows) if r.temperature > 0 and r.seed is not None]
    return {
        "needs_k": any(0 < r.top_k < vocab for r in rows),
        "needs_p": any(r.top_p < 1.0 for r in rows),
        "needs_min_p": any(r.min_p > 0.0 for r in rows),
        "needs_penalty": any(r.repetition_penalty != 1.0 for r in rows),
        "free_idx": torch.tensor(free, dtype=torch.long, device=device) if free else None,
        "seeded_idx": torch.tensor(seeded, dtype=torch.long, device=device) if seeded else None,
    }


def process_logits(logits: torch.Tensor, rows: list[RowSampling] | BatchParams) -> torch.Tensor:
    """Return the filtered, temperature-scaled logits (``-inf`` where a token is excluded).

    Rows with temperature 0 are left unscaled; the caller takes their argmax. Every operation is
    batched over rows: no per-row Python loop and no device-to-host copy.
    """
    import torch

    p = rows if isinstance(rows, BatchParams) else batch_params(rows, logits.shape[1], logits.device)
    logits = logits.float().clone()
    if p.needs_penalty and p.seen is not None:
        pen = p.penalty.unsqueeze(1)
        logits = torch.where(p.seen, torch.where(logits > 0, logits / pen, logits * pen), logits)
    logits.div_(p.temperature.unsqueeze(1))
    vocab = logits.shape[1]
    if p.needs_k or p.needs_p:
        sorted_logits, sorted_idx = torch.sort(logits, dim=1, descending=True)
        remove = torch.zeros_like(sorted_logits, dtype=torch.bool)
        if p.needs_k:
            remove |= torch.arange(vocab, device=logits.device).unsqueeze(0) >= p.top_k.unsqueeze(1)
        if p.needs_p:
            probs = torch.softmax(sorted_logits.masked_fill(remove, float("-inf")), dim=1)
            # Keep the smallest prefix whose mass reaches top_p (the first token is always kept).
            before = torch.cumsum(probs, dim=1) - probs
            remove |= before >= p.top_p.unsqueeze(1)
        mask = torch.zeros_like(remove).scatter(1, sorted_idx, remove)
        logits.masked_fill_(mask, float("-inf"))
    if p.needs_min_p:
        probs = torch.softmax(logits, dim=1)
        cutoff = probs.max(dim=1, keepdim=True).values * p.min_p.unsqueeze(1)
        logits.masked_fill_(probs < cutoff, float("-inf"))
    return logits


_MASK64 = (1 << 64) - 1


def _to_signed(x: int) -> int:
    x &= _MASK64
    return x - (1 << 64) if x >= 1 << 63 else x


_GOLDEN = _to_signed(0x9E3779B97F4A7C15)
_MIX1 = _to_signed(0xBF58476D1CE4E5B9)
_MIX2 = _to_signed(0x94D049BB133111EB)


def hashed_uniform(keys: torch.Tensor, vocab: int) -> torch.Tensor:
    """``[B, vocab]`` float32 uniforms in (0, 1): splitmix64 of ``key * 2^20 + token id`` per row.

    Integer overflow wraps in two's complement, which is what the hash wants. The top 23 bits make
    the uniform, so it is exact in float32 and never 0 or 1 (float64 math runs at 1/64 speed on
    consumer GPUs, and Gumbel-max needs no more precision than float32 logits have).
    """
    import torch

    ids = torch.arange(vocab, dtype=torch.int64, device=keys.device)
    return hashed_uniform_at(keys.unsqueeze(1), ids.unsqueeze(0))


def hashed_uniform_at(keys: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """`hashed_uniform`'s uniform for each (key, token id) pair (the two broadcast together).

    In place after the first sum: on a CPU each splitmix64 round is memory-bound, and a fresh
    tensor per operation cost 60% more.
    """
    import torch

    x = keys * (1 << 20) + ids
    x.add_(_GOLDEN)
    t = torch.empty_like(x)
    for shift, mix in ((30, _MIX1), (27, _MIX2), (31, None)):
        torch.bitwise_right_shift(x, shift, out=t).bitwise_and_((1 << (64 - shift)) - 1)  # a logical shift: torch's >> is arithmetic
        x.bitwise_xor_(t)
        if mix is not None:
            x.mul_(mix)
    torch.bitwise_right_shift(x, 41, out=t).bitwise_and_((1 << 23) - 1)
    return t.to(torch.float32).add_(0.5).mul_(1.0 / float(1 << 23))


CHUNK_ELEMENTS = 32_768
"""Rows of noise computed at a time on a CPU: the hash's dozen passes then stay in cache."""


def gumbel_argmax(logits: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """``argmax(logits + gumbel(keys, token ids))`` per row, the noise made a few rows at a time on a CPU.

    Why: the noise of every token of every row was a large part of a real model's decoding step on
    a CPU, each of the hash's dozen passes going out to memory (64 rows, one thread: SmolLM2's
    49,152 tokens 106 ms of a 0.4 s step, Gemma 3's 262,144 1.36 s). Rows of at most
    `CHUNK_ELEMENTS` values at a time keep it in cache: the same values, 39 and 313 ms
    (`benchmarks/seeded_sampling.py`). (Computing the noise only for tokens that can win was
    tried: a real model at temperature 1 leaves 25-45% of SmolLM2's vocabulary within the noise's
    range of its top token, and finding them cost more than it saved.)
    """
    import torch

    rows, vocab = logits.shape
    ids = torch.arange(vocab, dtype=torch.int64, device=logits.device).unsqueeze(0)
    # on a GPU one launch per operation for the whole batch: its memory keeps up, launches cost
    step = max(1, CHUNK_ELEMENTS // vocab) if logits.device.type == "cpu" else max(rows, 1)
    out = [torch.argmax(_gumbel(hashed_uniform_at(keys[i : i + step].unsqueeze(1), ids)).add_(logits[i : i + step]),
                        dim=1) for i in range(0, rows, step)]
    return out[0] if len(out) == 1 else torch.cat(out)


def _gumbel(u: torch.Tensor) -> torch.Tensor:
    """``-log(-log(u))``, written over ``u``."""
    return u.log_().neg_().log_().neg_()


def sample(
    processed: torch.Tensor,
    rows: list[RowSampling] | BatchParams,
    generator: torch.Generator | None,
    positions: list[int] | torch.Tensor | None = None,
) -> torch.Tensor:
    """One token id per row: argmax for temperature 0, else a draw from softmax(processed).

    ``positions`` (tokens generated so far per row, a list or a device tensor) key the seeded
    rows' noise, which is a pure function of (seed, choice index, position, token id).
    """
    import torch

    p = rows if isinstance(rows, BatchParams) else batch_params(rows, processed.shape[1], processed.device)
    out = torch.argmax(processed, dim=1)
    if p.free_idx is not None:
        probs = torch.softmax(processed.index_select(0, p.free_idx), dim=1)
        out.index_copy_(0, p.free_idx, torch.multinomial(probs, 1, generator=generator).squeeze(1))
    if p.seeded_idx is not None and p.seed_keys is not None:
        if positions is None:
            pos = torch.zeros(processed.shape[0], dtype=torch.int64, device=processed.device)
        elif isinstance(positions, list):
            pos = torch.tensor(positions, dtype=torch.int64, device=processed.device)
        else:
            pos = positions
        keys = p.seed_keys + pos.index_select(0, p.seeded_idx)
        out.index_copy_(0, p.seeded_idx, gumbel_argmax(processed.index_select(0, p.seeded_idx), keys))
    return out
