"""ExperienceStore: the table between rollout generation and training (TransferDock semantics).

Rows are samples, grouped by prompt (a *group* = the G rollouts of one prompt, with one
``group_id`` and the ``policy_version`` of the weights that generated it). Columns are named
(``completion_ids``, ``reward``, ``ref_logp``, ...). Different producers may fill different
columns at different times; a cell is *ready* once written.

Consumers (``"trainer"``, ``"reference"``, ...) are declared up front. For each consumer the
store remembers which groups it has taken:

* ``get(consumer, columns, num_groups)`` hands out only **whole groups** whose requested
  columns are ready in every row and which that consumer has not taken yet; replicas of one
  consumer never receive the same group twice, different consumers read the same group
  independently;
* when fewer groups are available it returns **None**, not a partial batch, unless
  ``allow_partial=True``; ``timeout`` (seconds) waits for more and is never infinite
  (``None`` means do not wait). Requests that can never succeed (an undeclared column or
  consumer, more groups than the capacity) raise :class:`~verifiers.errors.ConfigError`
  instead of returning None forever;
* a group is released (freed) once every declared consumer has taken it.

Policies on top:

* ``filter_zero_std``: once a group's ``reward_column`` is complete and all its rewards are
  equal (or it has one row), the group is dropped and counted in ``stats()["filtered_zero_std"]``;
  its advantages would all be 0 (DAPO's dynamic sampling), so the generator should refill,
  e.g. until ``num_available`` reaches what the next step needs;
* ``max_groups`` (capacity, live groups): ``put`` of a new group into a full store waits up to
  its ``timeout`` for room, then raises :class:`queue.Full`. Raising, not dropping, because a
  silently discarded group would skew the batch; blocking, because it is the backpressure a
  generator running ahead needs;
* ``max_staleness``: after ``set_policy_version(v)``, groups with ``policy_version < v -
  max_staleness`` are evicted and counted (``evicted_stale``); a new group already that old is
  refused (``rejected_stale``);
* picking order: ``"oldest"`` (insertion order, default: least stale data first) or
  ``"random"`` (a store-local ``random.Random(seed)``, saved in ``state_dict``, so a run is
  reproducible).

The public API takes and returns only plain data (strings, ints, lists, dicts, tensors, the
:class:`ExperienceBatch` dataclass); locks and waiting are internal. That keeps it usable as a
Ray actor (give the actor ``max_concurrency > 1`` if callers use ``timeout``).
"""

from __future__ import annotations

import queue
import random
import threading
import time
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor

from verifiers.errors import ConfigError

PutStatus = Literal["stored", "filtered", "stale", "retired"]


@dataclass
class ExperienceBatch:
    """Whole groups handed out by :meth:`ExperienceStore.get`, row-aligned.

    ``group_index[r]`` is the position (0..num_groups-1) of row r's group in this batch: pass
    it as the explicit group ids of the advantage functions. ``columns[name][r]`` is the value
    of a cell; ``policy_versions[r]`` the version of the weights that generated row r.
    """

    group_ids: list[Hashable]
    group_index: list[int]
    policy_versions: list[int]
    columns: dict[str, list[Any]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.group_index)

    @property
    def num_groups(self) -> int:
        return len(self.group_ids)

    def group_index_tensor(self) -> Tensor:
        """``group_index`` as int64, ready for ``ADVANTAGES[...](rewards, group_ids)``."""
        return torch.tensor(self.group_index, dtype=torch.int64)


@dataclass
class _Group:
    group_id: Hashable
    seq: int
    policy_version: int
    num_rows: int
    cells: dict[str, dict[int, Any]] = field(default_factory=dict)
    consumed_by: set[str] = field(default_factory=set)

    def ready(self, column: str) -> bool:
        return len(self.cells.get(column, ())) == self.num_rows


_COUNTERS = ("put_groups", "filtered_zero_std", "evicted_stale", "rejected_stale", "released")


class ExperienceStore:
    """Thread-safe in-process experience table with TransferDock semantics (see module doc)."""

    def __init__(
        self,
        *,
        consumers: Sequence[str] = ("trainer",),
        columns: Sequence[str] | None = None,
        max_groups: int | None = None,
        max_staleness: int | None = None,
        filter_zero_std: bool = False,
        reward_column: str = "reward",
        pick: Literal["oldest", "random"] = "oldest",
        seed: int = 0,
    ) -> None:
        if not consumers or len(set(consumers)) != len(consumers):
            raise ConfigError(f"consumers must be a non-empty list of distinct names, got {list(consumers)}")
        if max_groups is not None and max_groups < 1:
            raise ConfigError(f"max_groups must be >= 1 (or None for unbounded), got {max_groups}")
        if max_staleness is not None and max_staleness < 0:
            raise ConfigError(f"max_staleness must be >= 0 (or None for no limit), got {max_staleness}")
        if pick not in ("oldest", "random"):
            raise ConfigError(f"pick must be 'oldest' or 'random', got {pick!r}")
        if columns is not None and filter_zero_std and reward_column not in columns:
            raise ConfigError(
                f"filter_zero_std needs the reward column {reward_column!r} among columns={list(columns)}"
            )
        self.consumers = tuple(consumers)
        self.columns = None if columns is None else tuple(columns)
        self.max_groups = max_groups
        self.max_staleness = max_staleness
        self.filter_zero_std = filter_zero_std
        self.reward_column = reward_column
        self.pick = pick
        self.seed = seed
        self._cond = threading.Condition(threading.Lock())
        self._rng = random.Random(seed)
        self._groups: dict[Hashable, _Group] = {}
        self._retired: set[Hashable] = set()
        self._policy_version = 0
        self._next_seq = 0
        self._counters = dict.fromkeys(_COUNTERS, 0)
        self._handed_out = dict.fromkeys(self.consumers, 0)

    # ------------------------------------------------------------------ checks
    def _check_columns(self, names: Sequence[str]) -> None:
        if self.columns is not None:
            unknown = [c for c in names if c not in self.columns]
            if unknown:
                raise ConfigError(f"unknown column(s) {unknown}; this store has columns {list(self.columns)}")

    def _check_consumer(self, consumer: str) -> None:
        if consumer not in self.consumers:
            raise ConfigError(
                f"unknown consumer {consumer!r}; declare it in consumers={list(self.consumers)}"
            )

    # ------------------------------------------------------------------ writing
    def put(
        self,
        group_id: Hashable,
        columns: Mapping[str, Sequence[Any]],
        *,
        policy_version: int | None = None,
        rows: Sequence[int] | None = None,
        timeout: float | None = None,
    ) -> PutStatus:
        """Write cells of one group and mark them ready.

        The first put of a ``group_id`` creates the group: it needs ``policy_version`` and
        ``rows=None`` (one value per row, the group size is the length of the lists). Later
        puts add or overwrite columns, for all rows or for the row indices in ``rows``.

        Returns ``"stored"``; ``"filtered"`` when the write completed the reward column of a
        zero-variance group and the group was dropped; ``"stale"`` when a new group is already
        beyond ``max_staleness`` (refused); ``"retired"`` when the group was already filtered,
        evicted or released (the write is ignored). Raises :class:`queue.Full` when a new group
        finds the store at capacity for ``timeout`` seconds (None: at once).
        """
        if not columns:
            raise ConfigError("put needs at least one column")
        self._check_columns(list(columns))
        values = {name: list(vals) for name, vals in columns.items()}
        with self._cond:
            self._evict_stale()
            if group_id in self._retired:
                return "retired"
            group = self._groups.get(group_id)
            if group is None:
                group = self._create_group(group_id, values, policy_version, rows, timeout)
                if group is None:
                    return "retired" if group_id in self._retired else "stale"
            elif policy_version is not None and policy_version != group.policy_version:
                raise ConfigError(
                    f"group {group_id!r} was created with policy_version={group.policy_version}, "
                    f"a later put says {policy_version}; one group comes from one policy version"
                )
            row_ids = list(range(group.num_rows)) if rows is None else [int(r) for r in rows]
            if any(r < 0 or r >= group.num_rows for r in row_ids) or len(set(row_ids)) != len(row_ids):
                raise ConfigError(
                    f"rows {row_ids} must be distinct indices in [0, {group.num_rows}) for {group_id!r}"
                )
            for name, vals in values.items():
                if len(vals) != len(row_ids):
                    raise ConfigError(
                        f"column {name!r} has {len(vals)} values for {len(row_ids)} rows of group {group_id!r}"
                    )
            for name, vals in values.items():
                cells = group.cells.setdefault(name, {})
                was_ready = group.ready(name)
                for r, v in zip(row_ids, vals, strict=True):
                    cells[r] = v
                completes_reward = name == self.reward_column and not was_ready and group.ready(name)
                if (
                    completes_reward
                    and self.filter_zero_std
                    and _zero_variance([cells[r] for r in range(group.num_rows)])
                ):
                    self._retire(group)
                    self._counters["filtered_zero_std"] += 1
                    self._cond.notify_all()
                    return "filtered"
            self._cond.notify_all()
            return "stored"

    def _create_group(
        self,
        group_id: Hashable,
        values: dict[str, list[Any]],
        policy_version: int | None,
        rows: Sequence[int] | None,
        timeout: float | None,
    ) -> _Group | None:
        """Create a group, waiting for room if full; None when it is refused as stale."""
        if policy_version is None:
            raise ConfigError(f"the first put of group {group_id!r} must give policy_version")
        if rows is not None:
            raise ConfigError(f"the first put of group {group_id!r} must write whole columns (rows=None)")
        sizes = {len(v) for v in values.values()}
        if len(sizes) != 1 or 0 in sizes:
            raise ConfigError(
                f"columns of a new group must have one equal, non-zero length; got {sorted(sizes)}"
            )
        if self._too_stale(policy_version):
            self._counters["rejected_stale"] += 1
            return None
        if self.max_groups is not None and len(self._groups) >= self.max_groups:
            deadline = time.monotonic() + (timeout or 0.0)
            while len(self._groups) >= self.max_groups:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise queue.Full(
                        f"experience store is full ({self.max_groups} groups); consume groups, "
                        "raise max_groups, or pass a put timeout to wait for room"
                    )
                self._cond.wait(remaining)
                self._evict_stale()
            if group_id in self._retired:  # filtered, evicted or released while we waited
                return None
            if group_id in self._groups:  # another producer created it while we waited
                return self._groups[group_id]
            if self._too_stale(policy_version):  # the policy moved on while we waited
                self._counters["rejected_stale"] += 1
                return None
        group = _Group(group_id, self._next_seq, int(policy_version), sizes.pop())
        self._next_seq += 1
        self._groups[group_id] = group
        self._counters["put_groups"] += 1
        return group

    # ------------------------------------------------------------------ staleness
    def _too_stale(self, version: int) -> bool:
        return self.max_staleness is not None and version < self._policy_version - self.max_staleness

    def _evict_stale(self) -> int:
        stale = [g for g in self._groups.values() if self._too_stale(g.policy_version)]
        for g in stale:
            self._retire(g)
        self._counters["evicted_stale"] += len(stale)
        return len(stale)

    def set_policy_version(self, version: int) -> int:
        """Tell the store the trainer's current policy version; returns how many groups it evicted."""
        with self._cond:
            if version < self._policy_version:
                raise ConfigError(
                    f"policy version can only grow (now {self._policy_version}, got {version}); "
                    "use load_state_dict to go back to a checkpoint"
                )
            self._policy_version = int(version)
            evicted = self._evict_stale()
            if evicted:
                self._cond.notify_all()
            return evicted

    @property
    def policy_version(self) -> int:
        return self._policy_version

    def _retire(self, group: _Group) -> None:
        del self._groups[group.group_id]
        self._retired.add(group.group_id)

    # ------------------------------------------------------------------ reading
    def _candidates(self, consumer: str, columns: Sequence[str]) -> list[_Group]:
        found = [
            g
            for g in sorted(self._groups.values(), key=lambda g: g.seq)
            if consumer not in g.consumed_by and all(g.ready(c) for c in columns)
        ]
        if self.pick == "random":
            self._rng.shuffle(found)
        return found

    @staticmethod
    def _select(
        candidates: list[_Group], num_groups: int | None, num_rows: int | None
    ) -> tuple[list[_Group], bool]:
        chosen: list[_Group] = []
        if num_groups is not None:
            chosen = candidates[:num_groups]
            return chosen, len(chosen) == num_groups
        total = 0
        for g in candidates:
            if total + g.num_rows <= num_rows:  # type: ignore[operator]
                chosen.append(g)
                total += g.num_rows
            if total == num_rows:
                break
        return chosen, total == num_rows

    def get(
        self,
        consumer: str,
        columns: Sequence[str],
        num_groups: int | None = None,
        *,
        num_rows: int | None = None,
        allow_partial: bool = False,
        timeout: float | None = None,
    ) -> ExperienceBatch | None:
        """Take ``num_groups`` whole groups (or whole groups totalling exactly ``num_rows`` rows).

        Only groups not yet taken by ``consumer`` whose ``columns`` are ready in every row are
        eligible. Returns None when not enough are available after waiting up to ``timeout``
        seconds (None: no wait), or, with ``allow_partial=True``, whatever eligible groups there
        are (still None when there are none). Taken groups are marked for ``consumer`` only.
        """
        self._check_consumer(consumer)
        columns = [columns] if isinstance(columns, str) else list(columns)
        if not columns:
            raise ConfigError("get needs at least one column")
        self._check_columns(columns)
        if (num_groups is None) == (num_rows is None):
            raise ConfigError("pass exactly one of num_groups or num_rows")
        count = num_groups if num_groups is not None else num_rows
        if count is None or count < 1:
            raise ConfigError(f"num_groups / num_rows must be >= 1, got {count}")
        if num_groups is not None and self.max_groups is not None and num_groups > self.max_groups:
            raise ConfigError(
                f"asked for {num_groups} groups but the store holds at most {self.max_groups}; "
                "raise max_groups or ask for fewer"
            )
        deadline = time.monotonic() + (timeout or 0.0)
        with self._cond:
            while True:
                self._evict_stale()
                chosen, complete = self._select(self._candidates(consumer, columns), num_groups, num_rows)
                if complete:
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    if allow_partial and chosen:
                        break
                    return None
                self._cond.wait(remaining)
            # Picking and marking happen under one lock, so two replicas of a consumer can
            # never both take a group (the guarantee of TransferDock's per-consumer locks).
            return self._hand_out(consumer, columns, chosen)

    def _hand_out(self, consumer: str, columns: Sequence[str], chosen: list[_Group]) -> ExperienceBatch:
        batch = ExperienceBatch(
            group_ids=[], group_index=[], policy_versions=[], columns={c: [] for c in columns}
        )
        for i, g in enumerate(chosen):
            batch.group_ids.append(g.group_id)
            batch.group_index.extend([i] * g.num_rows)
            batch.policy_versions.extend([g.policy_version] * g.num_rows)
            for c in columns:
                batch.columns[c].extend(g.cells[c][r] for r in range(g.num_rows))
            g.consumed_by.add(consumer)
            if g.consumed_by.issuperset(self.consumers):
                self._retire(g)
                self._counters["released"] += 1
        self._handed_out[consumer] += len(chosen)
        self._cond.notify_all()
        return batch

    # ------------------------------------------------------------------ queries
    def num_available(self, consumer: str, columns: Sequence[str]) -> int:
        """Groups ``consumer`` could take now with ``columns`` ready (e.g. to decide on refills)."""
        self._check_consumer(consumer)
        self._check_columns(columns)
        with self._cond:
            self._evict_stale()
            return sum(
                1
                for g in self._groups.values()
                if consumer not in g.consumed_by and all(g.ready(c) for c in columns)
            )

    def all_consumed(self, consumer: str) -> bool:
        """True when every live group (ready or not) has been taken by ``consumer``."""
        self._check_consumer(consumer)
        with self._cond:
            self._evict_stale()
            return all(consumer in g.consumed_by for g in self._groups.values())

    def __len__(self) -> int:
        """Number of live groups."""
        with self._cond:
            return len(self._groups)

    def stats(self) -> dict[str, int]:
        """Counters for logging: live groups/rows, puts, filtered, evicted, refused, released, per consumer."""
        with self._cond:
            out = dict(self._counters)
            out["live_groups"] = len(self._groups)
            out["live_rows"] = sum(g.num_rows for g in self._groups.values())
            out["policy_version"] = self._policy_version
            for consumer, n in self._handed_out.items():
                out[f"handed_out/{consumer}"] = n
            return out

    def clear(self) -> None:
        """Drop every group and forget retired ids; counters and the policy version stay."""
        with self._cond:
            self._groups.clear()
            self._retired.clear()
            self._cond.notify_all()

    # ------------------------------------------------------------------ checkpointing
    def state_dict(self) -> dict[str, Any]:
        """Groups (cells included), consumption, counters, policy version and RNG state.

        Plain Python plus whatever cell values were put (tensors save fine with torch.save).
        Construction settings are not included: build the store the same way, then load.
        """
        with self._cond:
            version, internal, gauss = self._rng.getstate()
            return {
                "policy_version": self._policy_version,
                "next_seq": self._next_seq,
                "groups": [
                    {
                        "group_id": g.group_id,
                        "seq": g.seq,
                        "policy_version": g.policy_version,
                        "num_rows": g.num_rows,
                        "cells": {c: dict(cells) for c, cells in g.cells.items()},
                        "consumed_by": sorted(g.consumed_by),
                    }
                    for g in sorted(self._groups.values(), key=lambda g: g.seq)
                ],
                "retired": list(self._retired),
                "counters": dict(self._counters),
                "handed_out": dict(self._handed_out),
                "rng_state": [version, list(internal), gauss],
            }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Replace the contents with a :meth:`state_dict` (consumers must match this store's)."""
        groups = [
            _Group(
                group_id=d["group_id"],
                seq=int(d["seq"]),
                policy_version=int(d["policy_version"]),
                num_rows=int(d["num_rows"]),
                cells={c: {int(r): v for r, v in cells.items()} for c, cells in d["cells"].items()},
                consumed_by=set(d["consumed_by"]),
            )
            for d in state["groups"]
        ]
        unknown = {c for g in groups for c in g.consumed_by} - set(self.consumers)
        if unknown:
            raise ConfigError(
                f"saved state has consumers {sorted(unknown)} not declared here ({list(self.consumers)})"
            )
        version, internal, gauss = state["rng_state"]
        with self._cond:
            self._policy_version = int(state["policy_version"])
            self._next_seq = int(state["next_seq"])
            self._groups = {g.group_id: g for g in groups}
            self._retired = set(state["retired"])
            self._counters = {k: int(state["counters"].get(k, 0)) for k in _COUNTERS}
            self._handed_out = {c: int(state.get("handed_out", {}).get(c, 0)) for c in self.consumers}
            self._rng.setstate((version, tuple(internal), gauss))
            self._cond.notify_all()


def _zero_variance(rewards: list[Any]) -> bool:
    values = [float(r) for r in rewards]
    return len(values) < 2 or all(v == values[0] for v in values)


# ---------------------------------------------------------------------- transfer helpers
def _as_tensor(row: Tensor | Sequence[Any], dtype: torch.dtype | None) -> Tensor:
    t = row if isinstance(row, Tensor) else torch.tensor(row, dtype=dtype)
    return t if dtype is None else t.to(dtype)


def pad_rows(
    rows: Sequence[Tensor | Sequence[Any]],
    *,
    pad_value: float = 0,
    side: Literal["right", "left"] = "right",
    dtype: torch.dtype | None = None,
) -> tuple[Tensor, Tensor]:
    """Stack variable-length rows into ``[B, L_max, ...]`` plus a ``[B, L_max]`` long mask (1 = real).

    ``side="left"`` puts the padding first (prompts for generation, as verl does); ``"right"``
    after (completions for the loss). Trailing dimensions must agree across rows.
    """
    if side not in ("right", "left"):
        raise ConfigError(f"side must be 'right' or 'left', got {side!r}")
    tensors = [_as_tensor(r, dtype) for r in rows]
    if not tensors:
        return torch.zeros(0, 0, dtype=dtype or torch.float32), torch.zeros(0, 0, dtype=torch.long)
    trailing = {t.shape[1:] for t in tensors}
    if len(trailing) != 1:
        raise ConfigError(
            f"rows must agree in every dimension but the first, got shapes {sorted(map(tuple, trailing))}"
        )
    width = max(t.shape[0] for t in tensors)
    out = torch.full((len(tensors), width, *tensors[0].shape[1:]), pad_value, dtype=tensors[0].dtype)
    mask = torch.zeros(len(tensors), width, dtype=torch.long)
    for i, t in enumerate(tensors):
        n = t.shape[0]
        start = width - n if side == "left" else 0
        out[i, start : start + n] = t
        mask[i, start : start + n] = 1
    return out, mask


def pack(
    rows: Sequence[Tensor | Sequence[Any]], *, dtype: torch.dtype | None = None
) -> tuple[Tensor, Tensor]:
    """Concatenate variable-length rows into one flat tensor plus int64 lengths (one transfer, no padding)."""
    tensors = [_as_tensor(r, dtype) for r in rows]
    lengths = torch.tensor([t.shape[0] for t in tensors], dtype=torch.int64)
    if not tensors:
        return torch.zeros(0, dtype=dtype or torch.float32), lengths
    return torch.cat(tensors), lengths


def unpack(flat: Tensor, lengths: Tensor | Sequence[int]) -> list[Tensor]:
    """Inverse of :func:`pack`: split ``flat`` into rows of the given lengths."""
    sizes = [int(n) for n in (lengths.tolist() if isinstance(lengths, Tensor) else lengths)]
    if any(n < 0 for n in sizes) or sum(sizes) != flat.shape[0]:
        raise ConfigError(f"lengths {sizes} do not add up to the packed size {flat.shape[0]}")
    return list(flat.split(sizes))
