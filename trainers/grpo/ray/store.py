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
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from trainers.grpo.data.store import ExperienceBatch, ExperienceStore, PutStatus
from trainers.grpo.ray.cluster import require_ray
from trainers.grpo.ray.wire import decode_columns, encode_columns


class StoreActor:
    """Actor body: a real `ExperienceStore`; columns arrive and leave packed."""

    def __init__(self, **store_kwargs: Any) -> None:
        self.store = ExperienceStore(**store_kwargs)

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

    def node_id(self) -> str:
        """The Ray node this actor runs on (the trainer's: see `RayExperienceStore`)."""
        import ray

        return str(ray.get_runtime_context().get_node_id())


class RayExperienceStore:
    """Same API as `ExperienceStore`; the table lives in a Ray actor (see module doc)."""

    def __init__(self, *, max_concurrency: int = 16, name: str | None = None, **store_kwargs: Any) -> None:
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
        self.actor = actor_cls.options(**options).remote(**store_kwargs)
        self.consumers = tuple(store_kwargs.get("consumers", ("trainer",)))

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
