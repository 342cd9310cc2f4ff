"""Checkpoints that let a run continue exactly where it stopped.

A checkpoint holds the trainable weights, optimizer, LR scheduler, the generator's sampler
position, the experience store, every RNG (python, torch, CUDA where present, the engine's
sampler) and the step. It is written to a temporary directory and renamed into place, so a
crash mid-write never leaves a half checkpoint that `--resume` would pick up.

Several processes: rank 0 alone writes (every rank's weights are the same under DDP); what
differs per rank (its store, its RNGs) is kept under ``"ranks"``, one entry per rank, and is
optional on load, so a checkpoint of N processes resumes with M (ranks beyond N start from
their seeds). Tensors load onto the CPU (``map_location``): saved from GPU 0, they would
otherwise all land on GPU 0 in every process; ``load_state_dict`` moves them where they belong.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Any

import torch

from verifiers.errors import ConfigError

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
    torch.save(payload, tmp / "state.pt")
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    for old in sorted(p for p in root.glob("step_*") if p.is_dir())[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def latest_checkpoint(root: Path) -> Path | None:
    found = sorted(p for p in root.glob("step_*") if (p / "state.pt").is_file())
    return found[-1] if found else None


def load_checkpoint(path: Path) -> dict[str, Any]:
    file = path / "state.pt" if path.is_dir() else path
    if not file.is_file():
        raise ConfigError(f"no checkpoint at {path}; checkpoints live in <output_dir>/checkpoints/step_*")
    return torch.load(file, map_location="cpu", weights_only=False)


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
