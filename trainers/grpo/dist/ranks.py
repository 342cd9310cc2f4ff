"""This process's place among the training processes of an ``accelerate launch`` run.

Under ``accelerate launch --num_processes N`` every process runs the whole trainer on its own
share of the step's prompt groups. The few places where the ranks must agree go through
`Dist`: the loss normaliser (every rank divides by the global counts), the step's metrics
(global means, not rank 0's), refill and stop decisions (every rank runs the same number
of collectives, or one would wait forever), and who writes files (rank 0 only).

With one process (no launcher, or ``--num_processes 1``) nothing here touches
``torch.distributed``: every collective is the identity.

Launch: ``accelerate launch --multi_gpu --num_processes N -m trainers.grpo.cli CONFIG.toml``
(on a machine without GPUs this runs N gloo processes on the CPU; ``--cpu`` would start one).
Against external vLLM servers (``base_url`` / ``[vllm]``) the weight sync is one writer's job:
rank 0 starts the managed servers and pushes the weights while the others wait
(`on_main`, `trainers.grpo.sync.ranked`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch

T = TypeVar("T")

def launched_world_size() -> int:
    """The number of processes the launcher started (``WORLD_SIZE``), before any process group exists."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main_process() -> bool:
    """Rank 0 of a launched run, or the only process: the one that prints and writes files."""
    return int(os.environ.get("RANK", "0")) == 0


@dataclass
class Dist:
    """Rank, world size and the collectives the trainer needs (identities with one process)."""

    rank: int = 0
    world_size: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @classmethod
    def start(cls, *, cpu: bool) -> Dist:
        """Join the launcher's process group (accelerate's shared state, which `Accelerator` reuses).

        Done at the very start of setup, before anything is written, so rank 0 can create
        shared files (the tiny base model, ``config.json``) while the others wait for them.
        """
        if launched_world_size() <= 1:
            return cls()
        from accelerate import PartialState

        state = PartialState(cpu=cpu)
        return cls(rank=state.process_index, world_size=state.num_processes, device=state.device)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world_size > 1

    @property
    def local_world_size(self) -> int:
        """Training processes on this machine (the launcher's ``LOCAL_WORLD_SIZE``; else all)."""
        return int(os.environ.get("LOCAL_WORLD_SIZE") or self.world_size)

    def barrier(self) -> None:
        if self.active:
            torch.distributed.barrier()

    @contextlib.contextmanager
    def main_first(self) -> Iterator[None]:
        """Rank 0 runs the block first (e.g. creates a file), the others after it has finished."""
        if not self.is_main:
            self.barrier()
        yield
        if self.is_main:
            self.barrier()

    def _reduce_flag(self, flag: bool, op: Any) -> bool:
        t = torch.tensor([1 if flag else 0], dtype=torch.int64, device=self.device)
        torch.distributed.all_reduce(t, op=op)
        return bool(t.item())

    def any_rank(self, flag: bool) -> bool:
        """True on every rank when it is true on some rank (e.g. one rank was asked to stop)."""
        return self._reduce_flag(flag, torch.distributed.ReduceOp.MAX) if self.active else flag

    def every_rank(self, flag: bool) -> bool:
        """True on every rank only when it is true on all ranks (e.g. every store holds enough groups)."""
        return self._reduce_flag(flag, torch.distributed.ReduceOp.MIN) if self.active else flag

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` (picklable), in rank order, on every rank."""
        if not self.active:
            return [obj]
        out: list[Any] = [None] * self.world_size
        torch.distributed.all_gather_object(out, obj)
        return out

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` (picklable) on every rank; the others wait here until rank 0 sends it."""
        if not self.active:
            return obj
        box = [obj if self.is_main else None]
        torch.distributed.broadcast_object_list(box, src=0)
        return box[0]

    def on_main(self, what: str, fn: Callable[[], T]) -> T:
        """``fn()`` run by rank 0 alone, its result on every rank (the others wait for it).

        A failure on rank 0 reaches every rank as an exception: rank 0 re-raises its own, the
        others raise one of the same `verifiers.errors` class naming ``what`` failed on rank 0,
        so no rank is left waiting in a collective the writer never reaches.
        """
        if not self.active:
            return fn()
        outcome: tuple[str, Any, str] | None = None
        failure: BaseException | None = None
        if self.is_main:
            try:
                outcome = ("ok", fn(), "")
            except Exception as exc:
                failure, outcome = exc, ("error", type(exc).__name__, str(exc))
        outcome = self.broadcast(outcome)
        if failure is not None:
            raise failure
        assert outcome is not None
        status, value, message = outcome
        if status == "ok":
            return value
        raise rank_zero_error(value, f"{what} failed on rank 0: {message}")

    def sum_values(self, values: dict[str, float]) -> dict[str, float]:
        """Per-key sums over ranks (a key missing on a rank counts 0 there)."""
        if not self.active:
            return {k: float(v) for k, v in values.items()}
        out: dict[str, float] = {}
        for part in self.gather(values):
            for k, v in part.items():
                out[k] = out.get(k, 0.0) + float(v)
        return out

    def max_values(self, values: dict[str, float]) -> dict[str, float]:
        """Per-key maxima over ranks (keys missing on a rank are skipped there)."""
        if not self.active:
            return {k: float(v) for k, v in values.items()}
        out: dict[str, float] = {}
        for part in self.gather(values):
            for k, v in part.items():
                out[k] = max(out.get(k, float("-inf")), float(v))
        return out

    def gather_groups(self, rewards: torch.Tensor, group_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Every rank's rows of the step as one batch: ``(rewards, group_ids, where this rank's rows start)``.

        Ranks number their groups from 0, so each rank's ids are shifted past the previous
        ranks'; ranks may hold different numbers of rows (a rollout without tokens is dropped).
        """
        if not self.active:
            return rewards, group_ids, 0
        parts = self.gather((rewards.detach().cpu(), group_ids.detach().cpu()))
        all_r, all_g, shift, offset = [], [], 0, 0
        for r, (pr, pg) in enumerate(parts):
            if r == self.rank:
                offset = sum(len(x) for x in all_r)
            all_r.append(pr)
            all_g.append(pg + shift)
            shift += int(pg.max()) + 1 if len(pg) else 0
        return torch.cat(all_r).to(rewards.device), torch.cat(all_g).to(group_ids.device), offset

    def close(self, *holders: Any) -> None:
        """Leave the process group at the end of the run (a clean exit, no warnings at shutdown).

        ``holders`` (the policy; None is skipped) first let go of what keeps the group alive past its
        destruction (`trainers.grpo.learn.policy.Policy.release_process_group`).
        """
        if self.active and torch.distributed.is_initialized():
            for holder in holders:
                if holder is not None:
                    holder.release_process_group()
            torch.distributed.destroy_process_group()


def rank_zero_error(class_name: str, message: str) -> Exception:
    """The exception another rank raises for rank 0's ``class_name``: the same `verifiers.errors`
    class where there is one (the trainer's handlers then act alike on every rank), else `ServerError`."""
    from verifiers import errors

    cls = getattr(errors, class_name, None)
    if isinstance(cls, type) and issubclass(cls, errors.VFError):
        try:
            return cls(message)
        except TypeError:
            pass
    return errors.ServerError(message)
