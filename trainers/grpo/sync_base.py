"""What the weight syncs to separate servers share (`weight_sync` and `vllm_sync` both build on it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def save_merged(model: Any, tokenizer: Any | None, path: Path) -> None:
    """A ``save_pretrained`` directory of the policy (LoRA merged into a copy; the adapter keeps training)."""
    target = model
    if hasattr(model, "merge_and_unload"):
        import copy

        target = copy.deepcopy(model).merge_and_unload()
    target.save_pretrained(path)
    if tokenizer is not None:
        tokenizer.save_pretrained(path)


class ExternalServerSync:
    """What every sync to a separate server shares: no sampler state of ours to checkpoint, the
    final model saved merged, and a resume that pushes the trainer's weights (a restarted server
    holds the initial ones, a surviving one maybe newer)."""

    def after_step(self, version: int) -> None:
        raise NotImplementedError

    def on_resume(self, version: int) -> None:
        self.after_step(version)

    def rng_state(self) -> Any:
        return None

    def set_rng_state(self, state: Any) -> None:
        return None

    def save_final(self, model: Any, tokenizer: Any, path: Path) -> None:
        save_merged(model, tokenizer, path)

    def close(self) -> None:
        return None
