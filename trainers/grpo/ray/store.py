"""The ExperienceStore as a Ray actor, behind a proxy with the in-process store's API.

Rollout workers on any machine of the cluster ``put`` their groups into the one store; the
trainer ``get``s whole groups from it. The actor holds a real `ExperienceStore`, so every
rule (whole groups, per-consumer consumption, the zero-variance filter, staleness, the
capacity back-pressure) is the same code as in process. Only the transport differs:
columns cross the wire packed (`trainers.grpo.ray.wire`: one flat tensor plus lengths for
variable-length rows, never padded) in both directions.

The actor is *threaded* (``max_concurrency``): a ``put`` waiting for room (back-pressure) or
a ``get`` waiting for groups holds one thread while the others keep serving, exactly as
threads do around the in-process store's condition variable.

`RayExperienceStore` is picklable (it holds only the actor handle), so it can be handed to
the rollout workers; async callers (the workers' event loops) use `aput`.

With several training processes the actor is rank 0's, created under a name the other ranks
look up (`RayExperienceStore.attach`). A step's groups are handed out once, to rank 0
(`claim`), which is what the store's consumption and staleness rules see; the actor splits
them into one contiguous share per rank, by group id, and each rank fetches its own share
(`take_share`) straight from the actor (`trainers.grpo.ray.shares`).
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from trainers.grpo.data.store import ExperienceBatch, ExperienceStore, PutStatus
from trainers.grpo.ray.cluster import require_ray
from trainers.grpo.ray.wire import decode_columns, encode_columns
from verifiers.errors import VFError


class SharesOutOfStepError(VFError):
    """A training process asked for a share of a claim the store no longer holds (a bug, not a setting)."""


class StoreActor:
    """Actor body: a real `ExperienceStore`; columns arrive and leave packed."""

    def __init__(self, **store_kwargs: Any) -> None:
        self.store = ExperienceStore(**store_kwargs)
        self.claim_lock = threading.Lock()  # a claim and the ranks' takes run on the actor's threads
        self.claim_id = 0
        self.shares: list[ExperienceBatch | None] = []  # the last claim's, one per rank, until taken
        self.left: set[int] = set()  # training processes that disconnected (see `leave`)

    def put(self, group_id: Hashable, columns: dict[str, Any], **kwargs: Any) -> PutStatus:
        return self.store.put(group_id, decode_columns(columns), **kwargs)

    def get(self, consumer: str, columns: Sequence[str], num_groups: int | None = None,
            **kwargs: Any) -> ExperienceBatch | None:
        batch = self.store.get(consumer, columns, num_groups, **kwargs)
        if batch is not None:
            batch.columns = encode_columns(batch.columns)
        return batch

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """The store's other methods, whose arguments and results are small."""
        return getattr(self.store, method)(*args, **kwargs)

    def claim(self, consumer: str, columns: Sequence[str], num_groups: int, ranks: int, *,
              allow_partial: bool = False) -> tuple[int, list[int]] | None:
        """Take ``num_groups`` whole groups (one `get`) and split them into ``ranks`` shares.

        Returns ``(claim id, groups per share)``, or None when the store had too few. The shares
        are contiguous runs of the groups sorted by id: the split `rank_groups` makes of a batch,
        so with whole batches every rank gets the groups it would have generated itself.
        """
        with self.claim_lock:
            batch = self.store.get(consumer, columns, num_groups, allow_partial=allow_partial)
            if batch is None:
                return None
            self.claim_id += 1
            self.shares = split_groups(batch, ranks)
            return self.claim_id, [0 if b is None else b.num_groups for b in self.shares]

    def take_share(self, claim_id: int, rank: int) -> ExperienceBatch | None:
        """Rank ``rank``'s share of claim ``claim_id`` (packed), once; None for an empty share."""
        with self.claim_lock:
            if claim_id != self.claim_id or rank >= len(self.shares):
                raise SharesOutOfStepError(f"rank {rank} asked for its share of claim {claim_id}, the store holds "
                                           f"claim {self.claim_id}: the training processes are out of step")
            batch, self.shares[rank] = self.shares[rank], None
        if batch is not None:
            batch.columns = encode_columns(batch.columns)
        return batch

    def leave(self, rank: int) -> None:
        """Training process ``rank`` is done with the store (rank 0 waits for this before shutting Ray down)."""
        self.left.add(rank)

    def num_left(self) -> int:
        return len(self.left)

    def node_id(self) -> str:
        """The Ray node this actor runs on (the trainer's: see `RayExperienceStore`)."""
        import ray

        return str(ray.get_runtime_context().get_node_id())


class RayExperienceStore:
    """Same API as `ExperienceStore`; the table lives in a Ray actor (see module doc)."""

    def __init__(self, *, max_concurrency: int = 16, name: str | None = None, namespace: str | None = None,
                 **store_kwargs: Any) -> None:
        ray = require_ray()
        ExperienceStore(**store_kwargs)  # the same argument checks, raised here in the caller
        # On the trainer's own node: a rollout node that dies (spot instance, OOM) must not take the
        # experience with it. Soft affinity would let Ray move it; this one fails loudly instead.
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=False)
        actor_cls = ray.remote(num_cpus=0, max_concurrency=max_concurrency)(StoreActor)
        options: dict[str, Any] = {"scheduling_strategy": here}
        if name:
            options["name"] = name
        if namespace:
            options["namespace"] = namespace
        self.actor = actor_cls.options(**options).remote(**store_kwargs)
        self.consumers = tuple(store_kwargs.get("consumers", ("trainer",)))

    @classmethod
    def attach(cls, name: str, namespace: str) -> RayExperienceStore:
        """A handle to the store actor another process created as ``name`` (rank 0's, from the other ranks)."""
        ray = require_ray()
        self = cls.__new__(cls)
        self.actor = ray.get_actor(name, namespace=namespace)
        self.consumers = tuple(ray.get(self.actor.call.remote("__getattribute__", "consumers")))
        return self

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        import ray

        return ray.get(self.actor.call.remote(method, *args, **kwargs))

    # -- the ExperienceStore API ------------------------------------------------------------
    def put(self, group_id: Hashable, columns: Mapping[str, Sequence[Any]], *, policy_version: int | None = None,
            rows: Sequence[int] | None = None, timeout: float | None = None) -> PutStatus:
        import ray

        return ray.get(self.actor.put.remote(group_id, encode_columns(dict(columns)), policy_version=policy_version,
                                             rows=rows, timeout=timeout))

    async def aput(self, group_id: Hashable, columns: Mapping[str, Sequence[Any]], *,
                   policy_version: int | None = None, timeout: float | None = None) -> PutStatus:
        """`put` for an event loop (a rollout worker): awaits the actor instead of blocking."""
        return await self.actor.put.remote(group_id, encode_columns(dict(columns)), policy_version=policy_version,
                                           timeout=timeout)

    def get(self, consumer: str, columns: Sequence[str], num_groups: int | None = None, *,
            num_rows: int | None = None, allow_partial: bool = False,
            timeout: float | None = None) -> ExperienceBatch | None:
        import ray

        batch = ray.get(self.actor.get.remote(consumer, columns, num_groups, num_rows=num_rows,
                                              allow_partial=allow_partial, timeout=timeout))
        if batch is not None:
            batch.columns = decode_columns(batch.columns)
        return batch

    # -- several training processes (trainers.grpo.ray.shares) ----------------------------------
    def claim(self, consumer: str, columns: Sequence[str], num_groups: int, ranks: int, *,
              allow_partial: bool = False) -> tuple[int, list[int]] | None:
        import ray

        return ray.get(self.actor.claim.remote(consumer, list(columns), num_groups, ranks,
                                               allow_partial=allow_partial))

    def take_share(self, claim_id: int, rank: int) -> ExperienceBatch | None:
        import ray

        batch = ray.get(self.actor.take_share.remote(claim_id, rank))
        if batch is not None:
            batch.columns = decode_columns(batch.columns)
        return batch

    def leave(self, rank: int) -> None:
        import ray

        ray.get(self.actor.leave.remote(rank))

    def wait_for_leaves(self, count: int, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` until ``count`` other processes have called `leave`; True if they did."""
        import time

        import ray

        deadline = time.monotonic() + timeout_s
        while ray.get(self.actor.num_left.remote()) < count:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True

    def set_policy_version(self, version: int) -> int:
        return int(self._call("set_policy_version", version))

    @property
    def policy_version(self) -> int:
        import ray

        return int(ray.get(self.actor.call.remote("__getattribute__", "policy_version")))

    def num_available(self, consumer: str, columns: Sequence[str]) -> int:
        return int(self._call("num_available", consumer, list(columns)))

    def all_consumed(self, consumer: str) -> bool:
        return bool(self._call("all_consumed", consumer))

    def __len__(self) -> int:
        return int(self._call("__len__"))

    def stats(self) -> dict[str, int]:
        return dict(self._call("stats"))

    def clear(self) -> None:
        self._call("clear")

    def state_dict(self) -> dict[str, Any]:
        return dict(self._call("state_dict"))

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._call("load_state_dict", dict(state))

    def close(self) -> None:
        """End the actor (its groups go with it; checkpoint with `state_dict` first)."""
        import ray

        ray.kill(self.actor)


def split_groups(batch: ExperienceBatch, ranks: int) -> list[ExperienceBatch | None]:
    """``batch``'s groups sorted by id, cut into ``ranks`` contiguous shares (sizes differ by at most
    one; None for an empty share), each re-indexed from group 0 as `ExperienceStore.get` does."""
    order = sorted(range(batch.num_groups), key=lambda g: batch.group_ids[g])  # type: ignore[arg-type,return-value]
    rows: dict[int, list[int]] = {}
    for r, g in enumerate(batch.group_index):
        rows.setdefault(g, []).append(r)
    base, extra = divmod(len(order), ranks)
    shares: list[ExperienceBatch | None] = []
    start = 0
    for rank in range(ranks):
        mine = order[start:start + base + (1 if rank < extra else 0)]
        start += len(mine)
        if not mine:
            shares.append(None)
            continue
        share = ExperienceBatch(group_ids=[], group_index=[], policy_versions=[],
                                columns={c: [] for c in batch.columns})
        for i, g in enumerate(mine):
            share.group_ids.append(batch.group_ids[g])
            for r in rows[g]:
                share.group_index.append(i)
                share.policy_versions.append(batch.policy_versions[r])
                for c, values in batch.columns.items():
                    share.columns[c].append(values[r])
        shares.append(share)
    return shares
