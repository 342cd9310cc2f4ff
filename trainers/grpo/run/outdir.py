"""Which directories a run may write into: its own, new or empty ones, never a model's.

Before this check `vf-train` wrote into any ``output_dir``: into a model directory (its
``config.json`` replaced, the model no longer loads), the repository root, or an earlier run's
directory (its ``metrics.jsonl`` truncated, checkpoints of two runs mixed) without ``--resume``.
A run now marks the directory it creates (`MARKER`) and refuses, before writing anything:

* a model directory (a ``config.json`` with ``model_type``, or weight files), always;
* an earlier run's directory, unless ``--resume`` (continue it) or ``--overwrite`` (its run
  files are removed first);
* any other non-empty directory, unless ``--overwrite`` (or ``--resume`` where it holds
  checkpoints: runs from before the marker existed).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from trainers.grpo.dist.ranks import Dist
from verifiers.errors import ConfigError

MARKER = ".vf-train-run"
RUN_ENTRIES = ("metrics.jsonl", "config.json", "checkpoints", "final_model", "warmup_model", "base_model", "curves.png",
               "tensorboard", "vllm", MARKER)
"""What a run writes at the top of its directory (what ``--overwrite`` removes)."""
_WEIGHT_GLOBS = ("*.safetensors", "pytorch_model*.bin", "model.safetensors.index.json", "tokenizer.json")


def is_model_dir(path: Path) -> bool:
    """A saved model (Hugging Face layout): weights, a tokenizer, or a ``config.json`` with ``model_type``."""
    if any(next(path.glob(g), None) is not None for g in _WEIGHT_GLOBS):
        return True
    config = path / "config.json"
    try:
        return config.is_file() and "model_type" in json.loads(config.read_text())
    except (ValueError, OSError):
        return False


def has_run(out: Path) -> bool:
    """Whether ``out`` holds what a run produced: metrics, checkpoints or a final model."""
    return (out / "metrics.jsonl").exists() or (out / "checkpoints").is_dir() or (out / "final_model").exists()


def check_output_dir(out: Path, *, resume: bool, overwrite: bool) -> None:
    """Refuse ``out`` (a `ConfigError` naming the cause and the way on) unless this run may write there.

    Read-only, so every process of a launched run can call it before rank 0 writes anything.
    """
    if not out.exists() or (out.is_dir() and not any(out.iterdir())):
        return
    if not out.is_dir():
        raise ConfigError(f"output_dir {out} is a file; choose a directory")
    if is_model_dir(out):
        raise ConfigError(f"output_dir {out} holds a saved model (weights or a config.json with model_type): "
                          "vf-train never writes into a model directory; choose another output_dir")
    if (out / MARKER).is_file():
        if resume or overwrite or not has_run(out):  # marked but nothing run yet: nothing to lose
            return
        raise ConfigError(f"output_dir {out} holds an earlier vf-train run: pass --resume to continue it from its "
                          "last checkpoint, --overwrite to replace it, or choose another output_dir")
    if overwrite or (resume and (out / "checkpoints").is_dir()):
        return
    raise ConfigError(f"output_dir {out} is not empty and was not created by vf-train (no {MARKER} in it): choose "
                      "a new or empty output_dir, or pass --overwrite to write into it anyway")


def claim_output_dir(out: Path, *, resume: bool, overwrite: bool) -> None:
    """Create ``out`` and mark it as this run's (rank 0 only, after `check_output_dir`).

    ``--overwrite`` of an earlier run removes its run files first, so nothing of it mixes in.
    """
    if overwrite and not resume and (out / MARKER).is_file():
        for name in RUN_ENTRIES:
            entry = out / name
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            elif entry.exists() or entry.is_symlink():
                entry.unlink()
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("This directory holds a vf-train run; vf-train --resume continues it.\n")


def prepare_output_dir(out: Path, dist: Dist, cfg: Any, *, resume: bool) -> None:
    """Every process checks ``out`` as it was; rank 0 then claims it and writes ``config.json``."""
    check_output_dir(out, resume=resume, overwrite=cfg.overwrite_output_dir)
    dist.barrier()
    if dist.is_main:
        claim_output_dir(out, resume=resume, overwrite=cfg.overwrite_output_dir)
        cfg.save(out / "config.json")
