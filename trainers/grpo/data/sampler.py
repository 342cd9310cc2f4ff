"""RepeatSampler: the prompt order of GRPO training, resumable.

GRPO needs G samples of every prompt in one generation batch, and the same prompts reused
for ``num_iterations x gradient_accumulation`` optimisation passes. The sampler encodes both
in the index stream, as TRL's does (ANCHORS §4):

1. a permutation of the dataset from a sampler-local ``torch.Generator`` (seeded, so the
   global RNG state of the trainer and of other libraries does not change the order);
2. cut into chunks of ``batch_size`` unique prompts, an incomplete last chunk dropped
   (a generation batch must hold whole groups);
3. each chunk emitted ``repeat_count`` times, each index ``mini_repeat_count`` (G) times in a row.

So ``len = (N // batch_size) * batch_size * G * repeat_count``; without shuffling, 7 items,
G = 2, batch 3, repeat 4 give [0,0,1,1,2,2] x 4 then [3,3,4,4,5,5] x 4, and index 6 never.

Resuming: :meth:`state_dict` records the epoch, the number of indices already handed out in
it and the generator state at the start of the epoch, so after :meth:`load_state_dict` the
next ``iter()`` replays the same permutation and continues where the saved run stopped.
The state is plain Python (ints and lists) and can go into a JSON checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterator, Sized
from typing import Any

import torch
from torch.utils.data import Sampler

from verifiers.errors import ConfigError


class RepeatSampler(Sampler[int]):
    """Index sampler yielding each prompt ``mini_repeat_count`` times, chunks ``repeat_count`` times.

    ``data_source`` is the dataset (anything with ``len``) or its size. Iterating is
    stateful: breaking out of a loop and calling ``iter()`` again continues the same epoch;
    an exhausted iterator starts the next epoch with a new permutation.
    """

    def __init__(
        self,
        data_source: Sized | int,
        mini_repeat_count: int,
        batch_size: int = 1,
        repeat_count: int = 1,
        shuffle: bool = True,
        seed: int = 0,
    ) -> None:
        num_samples = data_source if isinstance(data_source, int) else len(data_source)
        for name, value, low in (
            ("number of samples", num_samples, 0),
            ("mini_repeat_count", mini_repeat_count, 1),
            ("batch_size", batch_size, 1),
            ("repeat_count", repeat_count, 1),
        ):
            if value < low:
                raise ConfigError(f"RepeatSampler {name} must be >= {low}, got {value}")
        self.num_samples = num_samples
        self.mini_repeat_count = mini_repeat_count
        self.batch_size = batch_size
        self.repeat_count = repeat_count
        self.shuffle = shuffle
        self.seed = seed
        self._generator = torch.Generator().manual_seed(seed)
        self._epoch = 0
        self._position = 0
        self._epoch_start_state: torch.Tensor | None = None

    def __len__(self) -> int:
        return (
            (self.num_samples // self.batch_size)
            * self.batch_size
            * self.mini_repeat_count
            * self.repeat_count
        )

    @property
    def epoch(self) -> int:
        """Number of completed passes over the data."""
        return self._epoch

    def _epoch_indices(self) -> list[int]:
        if self.shuffle:
            order = torch.randperm(self.num_samples, generator=self._generator).tolist()
        else:
            order = list(range(self.num_samples))
        usable = (self.num_samples // self.batch_size) * self.batch_size
        out: list[int] = []
        for start in range(0, usable, self.batch_size):
            chunk = order[start : start + self.batch_size]
            for _ in range(self.repeat_count):
                for index in chunk:
                    out.extend([index] * self.mini_repeat_count)
        return out

    def __iter__(self) -> Iterator[int]:
        if self._epoch_start_state is None:
            self._epoch_start_state = self._generator.get_state()
        else:  # resuming mid-epoch: replay this epoch's permutation from its saved start
            self._generator.set_state(self._epoch_start_state)
        indices = self._epoch_indices()
        while self._position < len(indices):
            index = indices[self._position]
            self._position += 1
            yield index
        self._epoch += 1
        self._position = 0
        self._epoch_start_state = None

    def state_dict(self) -> dict[str, Any]:
        """Plain-Python state: settings (checked on load), epoch, position and generator states."""
        return {
            "num_samples": self.num_samples,
            "mini_repeat_count": self.mini_repeat_count,
            "batch_size": self.batch_size,
            "repeat_count": self.repeat_count,
            "shuffle": self.shuffle,
            "seed": self.seed,
            "epoch": self._epoch,
            "position": self._position,
            "generator_state": self._generator.get_state().tolist(),
            "epoch_start_state": None
            if self._epoch_start_state is None
            else self._epoch_start_state.tolist(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict`; refuses one from a sampler with other settings.

        A different dataset size or batch layout would silently give a different order, so
        that is an error naming the mismatching setting.
        """
        for key in ("num_samples", "mini_repeat_count", "batch_size", "repeat_count", "shuffle", "seed"):
            if state.get(key) != getattr(self, key):
                raise ConfigError(
                    f"sampler state was saved with {key}={state.get(key)!r} but this sampler has "
                    f"{key}={getattr(self, key)!r}; resume with the same dataset and batch settings"
                )
        self._epoch = int(state["epoch"])
        self._position = int(state["position"])
        self._generator.set_state(torch.tensor(state["generator_state"], dtype=torch.uint8))
        start = state["epoch_start_state"]
        self._epoch_start_state = None if start is None else torch.tensor(start, dtype=torch.uint8)


def rank_groups(num_groups: int, rank: int, world_size: int) -> range:
    """The positions, within one step's ``num_groups`` prompts, that process ``rank`` generates and trains.

    Contiguous shares of equal size: every rank trains the same number of whole groups (a
    group is never split across processes, its advantages need all of it), and the ranks
    in order cover exactly the prompts one process would draw for the same global batch.
    """
    if world_size < 1 or not 0 <= rank < world_size:
        raise ConfigError(f"rank {rank} is not one of world_size={world_size} processes")
    if num_groups % world_size:
        raise ConfigError(
            f"prompts_per_step={num_groups} is the global number of prompts per step and must be divisible "
            f"by the number of processes ({world_size}); each process trains whole groups of an equal share"
        )
    share = num_groups // world_size
    return range(rank * share, (rank + 1) * share)
