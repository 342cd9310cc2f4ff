"""Checkpoints that let a run continue exactly where it stopped.

A checkpoint holds the trainable weights, optimizer, LR scheduler, the generator's sampler
position, the experience store, every RNG (python, torch, CUDA where present, the engine's
sampler) and the step. It is written to a temporary directory and renamed into place, so a
crash mid-write never leaves a half checkpoint that `--resume` would pick up. It holds no
pickled classes: tensors and plain Python only (rollouts as their JSON form), read back with
``torch.load(weights_only=True)``, so loading a checkpoint cannot run code.

Several processes: rank 0 alone writes (every rank's weights are the same under DDP; under
FSDP the shards are gathered to rank 0 first, into the same single-process layout); what
differs per rank (its store, its RNGs) is kept under ``"ranks"``, one entry per rank, and is
optional on load, so a checkpoint of N processes resumes with M (ranks beyond N start from
their seeds). Tensors load onto the CPU (``map_location``): saved from GPU 0, they would
otherwise all land on GPU 0 in every process; ``load_state_dict`` moves them where they belong.
"""

from __future__ import annotations

import pickle
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel
from rich.markup import escape

from trainers.grpo.data.generator import BatchGenerator
from trainers.grpo.dist.ranks import Dist
from trainers.grpo.learn.policy import Policy
from trainers.grpo.sync.weight_sync import WeightSync
from verifiers.errors import ConfigError
from verifiers.types import RolloutResult

_MODEL_TAG = "__vf_model__"
_MODELS: dict[str, type[BaseModel]] = {"RolloutResult": RolloutResult}
"""The records a checkpoint may hold besides tensors and plain data, by name (an allow-list)."""

PER_RANK = ("store", "rng", "engine_rng")
"""Checkpoint entries that differ between the processes of one run."""


def rng_state() -> dict[str, Any]:
    """Python, torch CPU and (when CUDA is available) every CUDA device's generator state."""
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore `rng_state`; CUDA states only where saved and present (a CPU checkpoint resumes on a GPU)."""
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    cuda = state.get("cuda")
    if cuda and torch.cuda.is_available():
        for device, s in enumerate(cuda[: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(s.cpu(), device)


def to_plain(obj: Any) -> Any:
    """``obj`` with every pydantic model (the store's rollouts) as a tagged dict of its JSON form.

    What is left is tensors and plain Python, which ``torch.load(weights_only=True)`` reads
    without unpickling a class. Only the models in `_MODELS` may be saved: anything else would
    not load back, so it fails now, at the save, with its name.
    """
    if isinstance(obj, BaseModel):
        name = type(obj).__name__
        if _MODELS.get(name) is not type(obj):
            raise ConfigError(f"cannot checkpoint a {type(obj).__module__}.{type(obj).__qualname__}: "
                              f"checkpoints hold tensors, plain data and {sorted(_MODELS)} only")
        return {_MODEL_TAG: name, "data": obj.model_dump(mode="json")}
    if isinstance(obj, dict):
        return {k: to_plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(to_plain(v) for v in obj)
    return obj


def from_plain(obj: Any) -> Any:
    """Undo `to_plain`: tagged dicts become their models again, validated by pydantic."""
    if isinstance(obj, dict):
        if _MODEL_TAG in obj and set(obj) == {_MODEL_TAG, "data"}:
            model = _MODELS.get(obj[_MODEL_TAG])
            if model is None:
                raise ConfigError(f"checkpoint holds an unknown record type {obj[_MODEL_TAG]!r}")
            return model.model_validate(obj["data"])
        return {k: from_plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(from_plain(v) for v in obj)
    return obj


def checkpoint_path(root: Path, step: int) -> Path:
    """Where step ``step``'s checkpoint lives (ranks that do not write it still report it)."""
    return root / f"step_{step:07d}"


def save_checkpoint(root: Path, step: int, payload: dict[str, Any], *, keep: int) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    final = checkpoint_path(root, step)
    tmp = root / f".tmp_step_{step:07d}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        torch.save(to_plain(payload), tmp / "state.pt")
    except (OSError, RuntimeError) as exc:  # a full disk (torch raises RuntimeError): no partial checkpoint left
        shutil.rmtree(tmp, ignore_errors=True)
        raise ConfigError(f"the checkpoint of step {step} could not be written to {root} ({exc}); free disk space "
                          "or set save_every / keep_checkpoints lower. Earlier checkpoints are intact.") from None
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    for old in sorted(p for p in root.glob("step_*") if p.is_dir())[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


class UnreadableCheckpointError(ConfigError):
    """A checkpoint file that exists but cannot be read (truncated, corrupted)."""


def load_latest(root: Path, log: Any) -> tuple[Path, dict[str, Any]] | None:
    """The newest checkpoint that reads, newest first; an unreadable one is named and skipped."""
    for path in sorted((p for p in root.glob("step_*") if (p / "state.pt").is_file()), reverse=True):
        try:
            return path, load_checkpoint(path)
        except UnreadableCheckpointError as exc:
            log(f"[yellow]{escape(str(exc))}; trying the previous checkpoint[/yellow]")
    return None


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Read a checkpoint without running code from it: tensors and plain Python only.

    ``weights_only=True`` refuses every pickled class, so a checkpoint handed over or planted
    in a run directory cannot execute anything on ``--resume``; rollouts come back through
    pydantic validation from their JSON form (`to_plain`).
    """
    file = path / "state.pt" if path.is_dir() else path
    if not file.is_file():
        raise ConfigError(f"no checkpoint at {path}; checkpoints live in <output_dir>/checkpoints/step_*")
    try:
        raw = torch.load(file, map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, OSError) as exc:  # truncated or unreadable (a crash or a full disk)
        raise UnreadableCheckpointError(f"checkpoint {file} cannot be read ({exc})") from None
    except pickle.UnpicklingError as exc:
        raise ConfigError(
            f"checkpoint {file} holds pickled Python objects, which could run code when loaded, so it is "
            "refused: it was written by a verifiers release before checkpoints became tensors and plain data "
            f"(or not by vf-train). Start the run again, or resume it with the release that wrote it. ({exc})"
        ) from None
    return from_plain(raw)


def rank_state(state: dict[str, Any], rank: int) -> dict[str, Any] | None:
    """Rank ``rank``'s own part of a checkpoint, or None when the saving run had fewer ranks.

    Rank 0 falls back to the top-level entries, which is also all a single-process (or
    older) checkpoint holds.
    """
    ranks = state.get("ranks")
    if ranks and rank < len(ranks):
        return ranks[rank]
    if rank == 0:
        return {k: state[k] for k in PER_RANK if k in state}
    return None


@dataclass
class Resumed:
    """Where a resumed run continues: its step, policy version and reward history."""

    step: int
    version: int
    reward_history: list[float]


class Checkpointer:
    """Saves and restores a run: the policy, the prompt order, the store, the RNGs and the counters."""

    def __init__(self, cfg: Any, out: Path, dist: Dist, console: Any, policy: Policy, generator: BatchGenerator,
                 store: Any, sync: WeightSync) -> None:
        self.cfg = cfg
        self.root = out / "checkpoints"
        self.dist = dist
        self.console = console
        self.policy = policy
        self.generator = generator
        self.store = store
        self.sync = sync

    def data_state(self, step: int, version: int, reward_history: list[float]) -> dict[str, Any]:
        """Everything a checkpoint holds besides weights, optimizer and scheduler."""
        return {
            "step": step,
            "version": version,
            "generator": self.generator.state_dict(),
            "store": self.store.state_dict(),
            "rng": rng_state(),
            "engine_rng": self.sync.rng_state(),
            "reward_history": list(reward_history),
        }

    def save(self, step: int, state: dict[str, Any], *, together: bool = True) -> Path:
        """``state``: `data_state` now, or the one taken at the start of an unfinished step.

        Rank 0 writes it. ``together``: every rank is at this point (a regular save), so their
        own parts (store, RNGs) are gathered into it and they wait until it exists. The stop
        and error paths pass False: ranks may get there at different moments, so no collective
        is safe; rank 0 saves alone, and the other ranks resume from their seeds.
        """
        path = checkpoint_path(self.root, step)
        if self.policy.sharded and not together:
            # The weights and the optimizer state are shards: gathering them is a collective the
            # other ranks are not at. The last regular checkpoint stands.
            self.console.print(f"[yellow]FSDP: no checkpoint at step {step} on this exit (the shards can only be "
                               "gathered with every rank); resume from the last regular one[/yellow]")
            return path
        own = {k: state[k] for k in PER_RANK}
        ranks = self.dist.gather(own) if together else [own]
        model, optimizer = self._weights()
        if self.dist.is_main:
            payload = {
                **state,
                "ranks": ranks,
                "model": model,
                "optimizer": optimizer,
                "scheduler": self.policy.scheduler.state_dict(),
                "config": self.cfg.model_dump(mode="json"),
            }
            path = save_checkpoint(self.root, step, payload, keep=self.cfg.keep_checkpoints)
        if together:
            self.dist.barrier()
        return path

    def resume(self, where: str | bool) -> Resumed | None:
        """Load the checkpoint (``True``: the latest); None when there is none (the run starts fresh)."""
        found = load_latest(self.root, self.console.print) if where is True else (
            Path(str(where)), load_checkpoint(Path(str(where))))
        if found is None:
            self.console.print("[yellow]no checkpoint to resume from; starting fresh[/yellow]")
            return None
        path, state = found
        self._load_weights(state["model"], state["optimizer"])
        self.policy.scheduler.load_state_dict(state["scheduler"])
        self.generator.load_state_dict(state["generator"])  # the global prompt order: the same on every rank
        own = rank_state(state, self.dist.rank)
        if own is not None:  # None: the saving run had fewer processes; this rank keeps its seeds
            self.store.load_state_dict(own["store"])
            set_rng_state(own["rng"])
            self.sync.set_rng_state(own["engine_rng"])
        resumed = Resumed(int(state["step"]), int(state["version"]), list(state.get("reward_history", [])))
        self.sync.on_resume(resumed.version)
        self.console.print(f"resumed from {path} at step {resumed.step}")
        return resumed

    def _weights(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The whole model and optimizer state (on rank 0; under FSDP gathered, with every rank taking part).

        Both are in a single process's layout either way, so a checkpoint of a sharded run resumes
        in one process and the other way round.
        """
        policy = self.policy
        if not policy.sharded:
            if not self.dist.is_main:
                return {}, {}
            return policy.unwrapped().state_dict(), policy.optimizer.state_dict()
        from trainers.grpo.learn.fsdp import full_optimizer_state, full_state_dict

        return (full_state_dict(policy.model, rank0_only=True),
                full_optimizer_state(policy.model, policy.optimizer, policy.params))

    def _load_weights(self, model: dict[str, Any], optimizer: dict[str, Any]) -> None:
        """Load the whole model and optimizer state (every rank read the file): under FSDP each rank keeps its shards."""
        policy = self.policy
        if not policy.sharded:
            policy.unwrapped().load_state_dict(model)
            policy.optimizer.load_state_dict(optimizer)
            return
        from trainers.grpo.learn.fsdp import load_full_optimizer_state, load_full_state_dict

        load_full_state_dict(policy.model, model)
        load_full_optimizer_state(policy.model, policy.optimizer, policy.params, optimizer)
