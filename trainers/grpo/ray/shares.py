"""Ray rollouts with several training processes: rank 0 owns the store, every rank trains its share.

Under ``accelerate launch --num_processes N`` with ``[ray]``, rank 0 starts (or joins) the Ray
cluster, the rollout workers and the store actor exactly as one process does, and its generator
hands *every* group of the global batch to the workers. The other ranks join the same cluster
at the address rank 0 reports and look the store actor up by name; they start no workers.

Why rank 0 claims the whole step, and each rank fetches its own share (rather than each rank
taking groups from the store by itself): the store's rules (whole groups, consumption, the
zero-variance filter, the staleness bound against one policy version) are written for one
consumer. One ``get`` of the global batch per step, by rank 0, is what a 1-process run does, so
those rules and their counters stay exactly the 1-process ones, and rank 0 alone moves the policy
version (once per step). The actor sorts the claimed groups by id and cuts them into N contiguous
shares, the split `rank_groups` makes of a batch without Ray, and each rank fetches its share
straight from the actor (rollouts never go through rank 0 or the process group; only the
claim's id and share sizes are broadcast). So the N ranks train the 1-process global batch.

The other ranks' generator (`FollowerGenerator`) generates nothing, but draws the same prompt
order and batch ids as rank 0, so the feed's decisions (refills, the stop on broken reward
functions) are taken by every rank on the same values, in the same order of collectives, and a
checkpoint's prompt position is the same whichever rank is read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trainers.grpo.data.generator import BatchGenerator, RolloutBatch
from trainers.grpo.data.store import ExperienceBatch, ExperienceStore
from trainers.grpo.dist.ranks import Dist
from trainers.grpo.ray.store import RayExperienceStore
from verifiers.envs.environment import Environment
from verifiers.rollout.inputs import RolloutInput

STORE_NAMESPACE = "vf-train"
"""The Ray namespace of a run's named store actor (each driver otherwise gets an anonymous one)."""


class RankShareStore:
    """One training process's view of rank 0's store actor, with the `ExperienceStore` methods the
    feed and the checkpoints use; every rank calls them at the same points (see module doc)."""

    def __init__(self, actor_store: RayExperienceStore, dist: Dist, store_kwargs: dict[str, Any]) -> None:
        self.actor_store = actor_store
        self.dist = dist
        self.store_kwargs = dict(store_kwargs)

    def num_available(self, consumer: str, columns: Sequence[str]) -> int:
        """Whole shares ready: the groups available to the run divided by the number of ranks."""
        return self.actor_store.num_available(consumer, columns) // self.dist.world_size

    def get(self, consumer: str, columns: Sequence[str], num_groups: int, *,
            allow_partial: bool = False) -> ExperienceBatch | None:
        """This rank's ``num_groups`` of a step: rank 0 claims them for all ranks, each fetches its own.

        A collective: every rank must call it. None on every rank when the store had too few
        (with ``allow_partial``: none at all); a partial claim may leave a rank's share empty (None).
        """
        world = self.dist.world_size
        claim = self.dist.on_main("taking the step's groups from the Ray store", lambda: self.actor_store.claim(
            consumer, columns, num_groups * world, world, allow_partial=allow_partial))
        if claim is None:
            return None
        claim_id, sizes = claim
        return self.actor_store.take_share(claim_id, self.dist.rank) if sizes[self.dist.rank] else None

    def set_policy_version(self, version: int) -> int:
        """Rank 0 moves the store's version (once per step); the other ranks' calls change nothing."""
        return self.actor_store.set_policy_version(version) if self.dist.is_main else int(version)

    def state_dict(self) -> dict[str, Any]:
        """The store on rank 0; an empty store on the others (the groups are all in rank 0's entry).

        Resuming with another topology: one process takes all of them; without Ray, N processes
        give rank 0 the groups left over and the others none, so no group is trained twice.
        """
        if self.dist.is_main:
            return self.actor_store.state_dict()
        return ExperienceStore(**self.store_kwargs).state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Rank 0 loads its entry into the actor. A checkpoint of N processes without Ray held a
        store per rank: the other ranks' leftover groups (beyond what their steps took) are dropped."""
        if self.dist.is_main:
            self.actor_store.load_state_dict(state)

    def stats(self) -> dict[str, int]:
        return self.actor_store.stats()

    def close(self, timeout_s: float = 30.0) -> None:
        """The other ranks leave; rank 0 waits (up to ``timeout_s``) for them to, then ends the actor,
        so no rank is still calling a store (or a cluster) that is already gone."""
        if not self.dist.is_main:
            self.actor_store.leave(self.dist.rank)
            return
        self.actor_store.wait_for_leaves(self.dist.world_size - 1, timeout_s)
        self.actor_store.close()


class FollowerGenerator(BatchGenerator):
    """The generator of a rank other than 0 under ``[ray]``: rank 0's workers generate the whole
    batch, so this one only draws the same prompts (see module doc) and returns empty batches."""

    def __init__(self, env: Environment, rows: Sequence[dict[str, Any]], **kwargs: Any) -> None:
        super().__init__(env, rows, make_client=lambda: None, **kwargs)

    async def _generate(self, batch_id: int, version: int, inputs: list[RolloutInput],
                        sampler_state: dict[str, Any]) -> RolloutBatch:
        return RolloutBatch(batch_id, version, [], 0.0, sampler_state)
