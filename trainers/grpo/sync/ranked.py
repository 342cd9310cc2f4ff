"""Several training processes against external vLLM servers: one writer, the others wait.

Under ``accelerate launch`` every rank holds a replica of the policy (DDP keeps them equal) and
its own client to the servers, through which it generates its share of each step's groups. The
servers hold one copy of the weights, so only rank 0 pushes them (`VLLMSync`: checkpoint reload,
NCCL, or the LoRA adapter alone, loaded on every replica) and checks them with the logprob probe; every other rank waits for the outcome
(`Dist.on_main`), so none sends a request of the next step before the new weights are served.
Around each sync the ranks also check what the single-process path never has to:

- every rank is at the same policy version (a rank that skipped or repeated a step would train
  on samples of a policy other than the one it thinks it has);
- every rank's replica holds the same weights as the writer's, the one the probe verified
  (`weights_fingerprint`, exact: DDP replicas are bitwise equal after each step);
- a server the writer dropped as unreachable is retired in every rank's client too.

The sync's metrics are the writer's, plus the requests each rank's client sent
(``ranks/<r>/requests``) and the per-replica counts summed over ranks (``servers/<i>/requests``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

import torch

from verifiers.errors import WeightSyncError

T = TypeVar("T")


class Ranks(Protocol):
    """What a sync needs of the training processes (`trainers.grpo.dist.ranks.Dist` is one; sync/
    imports no sibling folder, so it names the collectives instead of the class)."""

    world_size: int

    @property
    def is_main(self) -> bool: ...
    @property
    def active(self) -> bool: ...
    def gather(self, obj: Any) -> list[Any]: ...
    def on_main(self, what: str, fn: Callable[[], T]) -> T: ...


def weights_fingerprint(model: Any) -> list[float] | None:
    """Per-parameter sums (and sums of squares) in float64: equal replicas give equal lists.

    Every parameter counts, frozen or not: for a peft model that is the base weights and the
    adapters (``lora_A``/``lora_B``, and any ``modules_to_save`` copy), so replicas whose adapters
    drifted apart differ here even though a ``lora`` sync pushes rank 0's adapter alone.
    None for a sharded model (DTensor parameters): each rank holds a different shard, so
    comparing shards would say nothing about the replicas.
    """
    sums: list[torch.Tensor] = []
    with torch.no_grad():
        for p in model.parameters():
            if type(p).__name__ == "DTensor" or type(p.data).__name__ == "DTensor":
                return None
            t = p.detach().to(torch.float64)
            sums += [t.sum(), (t * t).sum()]
    return [float(x) for x in torch.stack(sums).cpu()] if sums else []  # one copy off the device


class OneWriterSync:
    """`WeightSync` for N processes: ``inner`` (a `VLLMSync`) pushes on rank 0 only (see module doc)."""

    def __init__(self, inner: Any, dist: Ranks, model: Any) -> None:
        self.inner = inner
        self.dist = dist
        self.model = model
        self.model_name = inner.model_name

    def make_client(self) -> Any:
        return self.inner.make_client()  # every rank its own client to every server (affinity per group)

    def updating(self) -> contextlib.AbstractContextManager[None]:
        return self.inner.updating()

    def after_step(self, version: int) -> dict[str, float]:
        return self._together(version, "weight sync", lambda: self.inner.after_step(version))

    def on_start(self, version: int) -> None:
        """The check that every server serves the starting policy, by rank 0, before any rank samples."""
        self._together(version, "the check of the servers' starting weights",
                       lambda: self.inner.on_start(version) or dict(self.inner.last))

    def on_resume(self, version: int) -> None:
        """The checkpoint's weights pushed by rank 0 (a server may hold the initial or newer ones)."""
        self._together(version, "the weight push on resume", lambda: self.inner.after_step(version))

    def rng_state(self) -> Any:
        return None  # the servers' samplers are seeded per request

    def set_rng_state(self, state: Any) -> None:
        return None

    def save_final(self, model: Any, tokenizer: Any, path: Path) -> None:
        self.inner.save_final(model, tokenizer, path)

    def close(self) -> None:
        self.inner.close()

    # -----------------------------------------------------------------------------------------
    def _together(self, version: int, what: str, push: Callable[[], dict[str, float]]) -> dict[str, float]:
        """Check the ranks agree, let rank 0 push, then every rank continues with rank 0's outcome."""
        replica_diff = self._check_replicas(version)
        pushed = self.dist.on_main(what, lambda: (dict(push()), self._live_urls()))
        metrics, live = pushed
        self._retire_missing(live)
        metrics.update(self._request_counts())
        metrics["sync/ranks"] = float(self.dist.world_size)
        if replica_diff is not None:
            metrics["sync/replica_max_diff"] = replica_diff
        return metrics

    def _check_replicas(self, version: int) -> float | None:
        """Every rank at ``version`` with the writer's weights; else every rank stops with the same error.

        Returns how far the replicas' fingerprints are apart (0.0; None for a sharded model).
        """
        parts = self.dist.gather((version, weights_fingerprint(self.model)))
        versions = [v for v, _ in parts]
        if len(set(versions)) > 1:
            raise WeightSyncError(f"the training processes disagree on the policy version before the weight sync: "
                                  f"{versions} (rank order); every rank must train the same steps")
        prints = [f for _, f in parts]
        if any(f is None or len(f) != len(prints[0] or []) for f in prints):
            return None
        diff = max(abs(a - b) for f in prints for a, b in zip(f, prints[0], strict=True))
        differ = [r for r, f in enumerate(prints) if f != prints[0]]
        if differ:
            raise WeightSyncError(
                f"after policy version {version} the weights of rank(s) {differ} differ from rank 0's, which are "
                "the ones pushed to the servers and verified: those ranks would compute their loss with another "
                "policy than the one the servers sample from. DDP keeps replicas equal; check that every rank steps the same optimizer "
                "on all-reduced gradients (no rank-local parameter changes)"
            )
        return diff

    def _live_urls(self) -> list[str]:
        return [a.base_url for a in getattr(self.inner, "admins", [])]

    def _retire_missing(self, live: list[str]) -> None:
        """A server rank 0 dropped (unreachable) is forgotten by this rank's sync and client too."""
        admins = getattr(self.inner, "admins", None)
        if admins is None:
            return
        for a in [a for a in admins if a.base_url not in live]:
            admins.remove(a)
            client = getattr(self.inner, "_client", None)
            if client is not None:
                client.retire(a.base_url)

    def _request_counts(self) -> dict[str, float]:
        """Requests per rank and per replica, over every rank's client (several servers only)."""
        client = getattr(self.inner, "_client", None)
        mine = [float(n) for n in client.requests] if client is not None else []
        counts = self.dist.gather(mine)
        out: dict[str, float] = {}
        for r, per_server in enumerate(counts):
            if per_server:
                out[f"ranks/{r}/requests"] = sum(per_server)
        for i in range(max((len(c) for c in counts), default=0)):
            out[f"servers/{i}/requests"] = sum(c[i] for c in counts if i < len(c))
        return out
