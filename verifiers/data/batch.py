"""A batch of rows: tensors and per-row Python objects kept side by side.

Training needs both kinds of column for the same rows (``input_ids`` next to the
prompt's answer string, its task, its group uid) and every reordering (repeat for G
samples, shuffle, split into gradient-accumulation chunks) must move them together,
or rewards end up attached to the wrong completions. ``DataBatch`` does every such
operation through one index list applied to all columns. It mirrors the behaviours
of verl's ``DataProto`` that the trainer relies on.

Operations return new batches and never modify the receiver. torch is imported only
inside the methods that need it.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from verifiers.errors import ConfigError

UID_KEY = "uid"


def _new_uids(n: int) -> list[str]:
    return [uuid.uuid4().hex for _ in range(n)]


def _values_equal(a: Any, b: Any) -> bool:
    if hasattr(a, "shape") and hasattr(b, "shape"):
        import torch

        return tuple(a.shape) == tuple(b.shape) and bool(torch.equal(torch.as_tensor(a), torch.as_tensor(b)))
    return list(a) == list(b)


class DataBatch:
    """Rows as ``tensors`` (each with the batch as its first dimension) plus ``objects`` (lists).

    Every row carries a ``uid`` (a uuid4 hex string per prompt, added on creation unless
    given): rows repeated from one prompt share it, which is how samples are grouped for
    advantages. A batch built only to attach new columns to another one (see `union`)
    is created with ``add_uid=False``.
    """

    def __init__(
        self,
        tensors: Mapping[str, Any] | None = None,
        objects: Mapping[str, Sequence[Any]] | None = None,
        *,
        uid: Sequence[str] | None = None,
        add_uid: bool = True,
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        self.tensors: dict[str, Any] = dict(tensors or {})
        self.objects: dict[str, list[Any]] = {k: list(v) for k, v in (objects or {}).items()}
        self.meta: dict[str, Any] = dict(meta or {})
        overlap = set(self.tensors) & set(self.objects)
        if overlap:
            raise ConfigError(f"column names used both as tensor and object: {sorted(overlap)}")
        if uid is not None:
            if UID_KEY in self.tensors or UID_KEY in self.objects:
                raise ConfigError("give the uids either as uid=... or as an objects['uid'] column, not both")
            self.objects[UID_KEY] = list(uid)
        self._size = self._check_sizes()
        if add_uid and UID_KEY not in self:
            self.objects[UID_KEY] = _new_uids(self._size)

    def _check_sizes(self) -> int:
        sizes: dict[str, int] = {}
        for k, t in self.tensors.items():
            shape = getattr(t, "shape", None)
            if shape is None or len(shape) == 0:
                raise ConfigError(f"tensor column {k!r} must have a batch dimension (got {type(t).__name__})")
            sizes[k] = int(shape[0])
        sizes.update({k: len(v) for k, v in self.objects.items()})
        if not sizes:
            raise ConfigError("a DataBatch needs at least one tensor or object column")
        if len(set(sizes.values())) > 1:
            raise ConfigError(f"all columns of a DataBatch must have the same number of rows, got {sizes}")
        return next(iter(sizes.values()))

    # -- access ---------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._size

    def __getitem__(self, key: str) -> Any:
        if key in self.tensors:
            return self.tensors[key]
        if key in self.objects:
            return self.objects[key]
        raise KeyError(f"no column {key!r}; columns: {self.keys()}")

    def __contains__(self, key: object) -> bool:
        return key in self.tensors or key in self.objects

    def keys(self) -> list[str]:
        return [*self.tensors, *self.objects]

    @property
    def uid(self) -> list[str]:
        return list(self[UID_KEY])

    def __repr__(self) -> str:
        shapes = {k: tuple(t.shape) for k, t in self.tensors.items()}
        return f"DataBatch(size={self._size}, tensors={shapes}, objects={sorted(self.objects)})"

    # -- reordering -----------------------------------------------------------------------
    def _derived(self, tensors: dict[str, Any], objects: dict[str, list[Any]]) -> DataBatch:
        return DataBatch(tensors, objects, add_uid=False, meta=self.meta)

    def select(self, indices: Sequence[int]) -> DataBatch:
        """The rows at ``indices`` (in that order, repeats allowed), for every column at once."""
        idx = [int(i) for i in indices]
        bad = [i for i in idx if not -self._size <= i < self._size]
        if bad:
            raise ConfigError(f"row indices {bad[:5]} out of range for a batch of {self._size} rows")
        idx = [i % self._size for i in idx] if self._size else idx
        tensors = {k: _take(t, idx) for k, t in self.tensors.items()}
        objects = {k: [v[i] for i in idx] for k, v in self.objects.items()}
        return self._derived(tensors, objects)

    def repeat(self, n: int, interleave: bool = True) -> DataBatch:
        """Each row ``n`` times: ``[a, a, b, b]`` when interleaving, else ``[a, b, a, b]``. uids are copied."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError(f"repeat needs a positive count, got {n!r}")
        rows = range(self._size)
        idx = [i for i in rows for _ in range(n)] if interleave else [i for _ in range(n) for i in rows]
        return self.select(idx)

    def shuffle(self, generator: Any = None) -> DataBatch:
        """The rows in one random order shared by every column.

        ``generator`` is a ``torch.Generator``, an int seed, or None (torch's global RNG).
        """
        import torch

        if isinstance(generator, int) and not isinstance(generator, bool):
            generator = torch.Generator().manual_seed(generator)
        perm = torch.randperm(self._size, generator=generator).tolist()
        return self.select(perm)

    def split(self, num_chunks: int) -> list[DataBatch]:
        """``num_chunks`` consecutive batches of equal size (e.g. gradient-accumulation micro-batches)."""
        if isinstance(num_chunks, bool) or not isinstance(num_chunks, int) or num_chunks < 1:
            raise ConfigError(f"split needs a positive number of chunks, got {num_chunks!r}")
        if self._size % num_chunks:
            raise ConfigError(
                f"cannot split a batch of {self._size} rows into {num_chunks} equal chunks; "
                f"choose a number of chunks that divides {self._size} (e.g. adjust gradient accumulation steps)"
            )
        step = self._size // num_chunks
        return [self.select(range(c * step, (c + 1) * step)) for c in range(num_chunks)]

    # -- combining ------------------------------------------------------------------------
    def union(self, other: DataBatch) -> DataBatch:
        """Columns of both batches for the same rows; columns present in both must be equal.

        uids are compared like any other column, so two batches about different prompts
        cannot be merged by accident. To attach new columns, build them with
        ``DataBatch(tensors=..., add_uid=False)`` (or ``uid=batch.uid``).
        """
        if len(other) != self._size:
            raise ConfigError(f"cannot union batches of different sizes: {self._size} and {len(other)} rows")
        tensors, objects = dict(self.tensors), {k: list(v) for k, v in self.objects.items()}
        for source, target in ((other.tensors, tensors), (other.objects, objects)):
            for k, v in source.items():
                if k in self and not _values_equal(self[k], v):
                    hint = " (build the batch of new columns with add_uid=False)" if k == UID_KEY else ""
                    raise ConfigError(
                        f"cannot union: column {k!r} is in both batches with different values{hint}"
                    )
                target[k] = list(v) if isinstance(v, list) else v
        return DataBatch(tensors, objects, add_uid=False, meta={**self.meta, **other.meta})

    @classmethod
    def concat(cls, batches: Sequence[DataBatch]) -> DataBatch:
        """Rows of several batches with the same columns, one after another (inverse of ``split``)."""
        if not batches:
            raise ConfigError("concat needs at least one batch")
        keys = sorted(batches[0].keys())
        for b in batches[1:]:
            if sorted(b.keys()) != keys:
                raise ConfigError(
                    f"cannot concat batches with different columns: {keys} vs {sorted(b.keys())}"
                )
        first = batches[0]
        tensors = {}
        if first.tensors:
            import torch

            tensors = {k: torch.cat([b.tensors[k] for b in batches], dim=0) for k in first.tensors}
        objects = {k: [x for b in batches for x in b.objects[k]] for k in first.objects}
        return cls(tensors, objects, add_uid=False, meta=first.meta)


def _take(t: Any, idx: list[int]) -> Any:
    if not idx:
        return t[:0]
    return t[idx]
