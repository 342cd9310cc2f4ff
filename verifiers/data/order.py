"""A seeded, resumable order over dataset indices.

Training resumes from a checkpoint must see exactly the prompts the interrupted run
would have seen next, and every process of a distributed run must agree on them
without talking to each other. ``DataOrder`` is therefore a pure function of
``(num_items, seed, epoch, position)``: each epoch is a permutation drawn from a
generator seeded with ``seed + epoch`` (verl/TRL reshuffle per epoch the same way),
and the state to checkpoint is four integers.

The permutation is a Fisher-Yates shuffle driven by ``random.Random(seed).random()``,
whose output stream Python guarantees across versions and platforms (unlike
``random.shuffle`` or numpy's ``Generator.permutation``), so a checkpoint written
on one machine resumes identically on another.
"""

from __future__ import annotations

import random
from typing import Any

from verifiers.errors import ConfigError


def epoch_permutation(num_items: int, seed: int) -> list[int]:
    """A permutation of ``range(num_items)`` that depends only on ``num_items`` and ``seed``."""
    rng = random.Random(seed)
    order = list(range(num_items))
    for i in range(num_items - 1, 0, -1):
        j = min(int(rng.random() * (i + 1)), i)
        order[i], order[j] = order[j], order[i]
    return order


class DataOrder:
    """Hands out dataset indices epoch after epoch, reshuffled with ``seed + epoch``.

    ``next_indices(k)`` continues into the next epoch when the current one runs out,
    unless ``drop_last=True``: then a request never spans two epochs and the tail of an
    epoch that cannot fill it is skipped (like a data loader with ``drop_last``).
    """

    def __init__(
        self, num_items: int, *, seed: int = 0, shuffle: bool = True, drop_last: bool = False
    ) -> None:
        if isinstance(num_items, bool) or not isinstance(num_items, int) or num_items < 1:
            raise ConfigError(
                f"DataOrder needs a positive number of items, got {num_items!r} (is the dataset empty?)"
            )
        self.num_items = num_items
        self.seed = int(seed)
        self.shuffle = shuffle
        self.drop_last = drop_last
        self._epoch = 0
        self._position = 0
        self._order: list[int] | None = None

    @property
    def epoch(self) -> int:
        """The epoch the next index comes from (0-based)."""
        return self._epoch

    @property
    def position(self) -> int:
        """How many indices of the current epoch have been handed out."""
        return self._position

    def __len__(self) -> int:
        return self.num_items

    def epoch_order(self, epoch: int) -> list[int]:
        """The full index order of ``epoch`` (identity when ``shuffle=False``)."""
        if not self.shuffle:
            return list(range(self.num_items))
        return epoch_permutation(self.num_items, self.seed + epoch)

    def _current(self) -> list[int]:
        if self._order is None:
            self._order = self.epoch_order(self._epoch)
        return self._order

    def _advance_epoch(self) -> None:
        self._epoch += 1
        self._position = 0
        self._order = None

    def next_indices(self, k: int) -> list[int]:
        """The next ``k`` indices (moving on to the next epoch as needed)."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ConfigError(f"next_indices needs a positive count, got {k!r}")
        if self.drop_last:
            if k > self.num_items:
                raise ConfigError(
                    f"cannot take {k} indices per step from {self.num_items} items with drop_last=True; "
                    f"use a smaller batch or drop_last=False"
                )
            if self.num_items - self._position < k:
                self._advance_epoch()
        out: list[int] = []
        while len(out) < k:
            order = self._current()
            take = min(k - len(out), self.num_items - self._position)
            out.extend(order[self._position : self._position + take])
            self._position += take
            if self._position == self.num_items:
                self._advance_epoch()
        return out

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly where this order stands."""
        return {
            "num_items": self.num_items,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "drop_last": self.drop_last,
            "epoch": self._epoch,
            "position": self._position,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state``; refuses a state written for another dataset size or seed."""
        for key in ("num_items", "seed", "shuffle"):
            if key in state and state[key] != getattr(self, key):
                raise ConfigError(
                    f"cannot resume the data order: checkpoint has {key}={state[key]!r} but this run has "
                    f"{key}={getattr(self, key)!r}; use the same dataset and seed as the checkpointed run"
                )
        epoch, position = int(state["epoch"]), int(state["position"])
        if epoch < 0 or not 0 <= position <= self.num_items:
            raise ConfigError(f"corrupt data-order state: epoch={epoch}, position={position}")
        self.drop_last = bool(state.get("drop_last", self.drop_last))
        self._epoch, self._position, self._order = epoch, position, None
        if self._position == self.num_items:
            self._advance_epoch()
