"""Checkpoints that let a run continue exactly where it stopped.

A checkpoint holds the trainable weights, optimizer, LR scheduler, the generator's sampler
position, the experience store, every RNG (python, torch, the engine's sampler) and the step.
It is written to a temporary directory and renamed into place, so a crash mid-write never
leaves a half checkpoint that `--resume` would pick up.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Any

import torch

from verifiers.errors import ConfigError


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])


def save_checkpoint(root: Path, step: int, payload: dict[str, Any], *, keep: int) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step:07d}"
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
    return torch.load(file, weights_only=False)
