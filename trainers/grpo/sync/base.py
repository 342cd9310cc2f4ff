"""What the weight syncs to separate servers share (`weight_sync` and `vllm_sync` both build on it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def save_merged(model: Any, tokenizer: Any | None, path: Path) -> None:
    """A ``save_pretrained`` directory of the policy; a LoRA policy is saved merged, the adapter untouched.

    The merged weights are built on the CPU one tensor at a time (`iter_export_weights`): merging
    a deep copy would need a second copy of the model in GPU memory, beside the optimizer state.
    """
    if hasattr(model, "merge_and_unload"):
        from trainers.grpo.sync.export import iter_export_weights

        state = {name: t.to("cpu", copy=True) for name, t in iter_export_weights(model, include_tied=False)}
        model.get_base_model().save_pretrained(path, state_dict=state)
    else:
        model.save_pretrained(path)
    if tokenizer is not None:
        tokenizer.save_pretrained(path)


class ExternalServerSync:
    """What every sync to a separate server shares: no sampler state of ours to checkpoint, the
    final model saved merged, and a resume that pushes the trainer's weights (a restarted server
    holds the initial ones, a surviving one maybe newer)."""

    def after_step(self, version: int) -> dict[str, float]:
        """Push the weights of ``version``; returns the sync's metrics for the step (``{}``: none)."""
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
