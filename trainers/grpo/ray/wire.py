"""How experience columns cross a process boundary (a Ray call): packed, never padded.

Rows of token ids and logprobs have different lengths. Padding them to the longest row
before a transfer would send (and allocate) ``rows x max_len`` values; TransferDock instead
sends one flat tensor plus the row lengths (ANCHORS.md §4), and so does this module:

* a column of variable-length numeric rows (1-D tensors, or lists of ints / floats) becomes
  a `PackedRows`: ``flat`` (the rows concatenated) and ``lengths`` (int64);
* a column of `RolloutResult`s becomes a `PackedResults`: the per-turn token ids and
  logprobs of every rollout packed as above, the rest (text, rewards, metrics, errors) as
  plain dicts without the token lists;
* anything else (scalars, strings, mixed values) travels as the plain list it is.

`encode_column` and `decode_column` are exact inverses for the first two kinds: the decoded
rollouts rebuild the same `TurnTokens`, so `RolloutResult.token_rows()` (what the trainer
trains on) is unchanged by the trip.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from trainers.grpo.data.store import pack, unpack
from verifiers.types import RolloutResult, TurnTokens


@dataclass
class PackedRows:
    """Variable-length rows as one flat tensor plus their lengths (``as_list``: rows were lists)."""

    flat: Tensor
    lengths: Tensor
    as_list: bool

    def rows(self) -> list[Any]:
        parts = unpack(self.flat, self.lengths)
        return [p.tolist() for p in parts] if self.as_list else parts


@dataclass
class PackedResults:
    """Rollouts with their per-turn token data packed (one flat tensor per kind for all turns)."""

    meta: list[dict[str, Any]]  # each rollout without `tokens` (model_dump, JSON-safe)
    turns: Tensor  # [rollouts] number of model calls of each rollout
    prompt_ids: PackedRows  # one row per turn, all rollouts in order
    completion_ids: PackedRows
    completion_logprobs: PackedRows
    finish_reasons: list[str | None]


def _numeric_rows(values: Sequence[Any]) -> tuple[bool, torch.dtype] | None:
    """``(as_list, dtype)`` when every value is a 1-D tensor or a list of numbers, else None."""
    if not values:
        return None
    if all(isinstance(v, Tensor) and v.dim() == 1 for v in values):
        dtypes = {v.dtype for v in values}
        return (False, dtypes.pop()) if len(dtypes) == 1 else None
    if not all(isinstance(v, list) for v in values):
        return None
    items = [x for v in values for x in v]
    if any(isinstance(x, bool) or not isinstance(x, int | float) for x in items):
        return None
    return True, (torch.int64 if all(isinstance(x, int) for x in items) else torch.float64)


def pack_rows(values: Sequence[Any], dtype: torch.dtype) -> PackedRows:
    flat, lengths = pack(list(values), dtype=dtype)
    return PackedRows(flat, lengths, as_list=not any(isinstance(v, Tensor) for v in values))


def pack_results(results: Sequence[RolloutResult]) -> PackedResults:
    turns = [t for r in results for t in r.tokens]
    return PackedResults(
        meta=[r.model_dump(mode="json", exclude={"tokens", "state"}) for r in results],
        turns=torch.tensor([len(r.tokens) for r in results], dtype=torch.int64),
        prompt_ids=pack_rows([list(t.prompt_ids) for t in turns], torch.int64),
        completion_ids=pack_rows([list(t.completion_ids) for t in turns], torch.int64),
        # float64: a float32 trip would round the sampler's logprobs the trainer compares against
        completion_logprobs=pack_rows([[float(x) for x in t.completion_logprobs] for t in turns], torch.float64),
        finish_reasons=[t.finish_reason for t in turns],
    )


def unpack_results(packed: PackedResults) -> list[RolloutResult]:
    prompts = packed.prompt_ids.rows()
    completions = packed.completion_ids.rows()
    logprobs = packed.completion_logprobs.rows()
    out: list[RolloutResult] = []
    k = 0
    for meta, n in zip(packed.meta, packed.turns.tolist(), strict=True):
        tokens = [
            TurnTokens(prompt_ids=prompts[i], completion_ids=completions[i], completion_logprobs=logprobs[i],
                       finish_reason=packed.finish_reasons[i])
            for i in range(k, k + n)
        ]
        k += n
        out.append(RolloutResult.model_validate({**meta, "tokens": tokens}))
    return out


def encode_column(values: Sequence[Any]) -> PackedRows | PackedResults | list[Any]:
    """The wire form of one column (see module doc); plain values stay a list."""
    values = list(values)
    if values and all(isinstance(v, RolloutResult) for v in values):
        return pack_results(values)
    kind = _numeric_rows(values)
    if kind is not None:
        return pack_rows(values, kind[1])
    return values


def decode_column(wire: PackedRows | PackedResults | list[Any]) -> list[Any]:
    """Inverse of `encode_column`."""
    if isinstance(wire, PackedResults):
        return unpack_results(wire)
    if isinstance(wire, PackedRows):
        return wire.rows()
    return list(wire)


def encode_columns(columns: dict[str, Sequence[Any]]) -> dict[str, Any]:
    return {name: encode_column(vals) for name, vals in columns.items()}


def decode_columns(columns: dict[str, Any]) -> dict[str, list[Any]]:
    return {name: decode_column(wire) for name, wire in columns.items()}
