"""The weight sync of a sharded (FSDP) run: the full copy is refreshed first, then synced as usual.

Under FSDP no rank holds whole weights, so the embedded engine and the vLLM sync read a full
copy of the model (`trainers.grpo.learn.policy.Policy.mirror`). After every optimizer step
(and on resume) each rank gathers the trained shards into its copy, which is one collective
every rank must join, and only then does the wrapped sync do its usual work: the embedded
engine bumps its version, `trainers.grpo.sync.ranked.OneWriterSync` compares the ranks'
fingerprints of the gathered weights and lets rank 0 push them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any


class MirroredSync:
    """`WeightSync` around ``inner``: ``refresh()`` (the gather) runs before each sync, the engine paused."""

    def __init__(self, inner: Any, refresh: Callable[[], None]) -> None:
        self.inner = inner
        self.refresh = refresh
        self.model_name = inner.model_name

    def make_client(self) -> Any:
        return self.inner.make_client()

    def updating(self) -> contextlib.AbstractContextManager[None]:
        return self.inner.updating()

    def _refreshed(self) -> None:
        with self.inner.updating():  # an engine decoding ahead reads the copy: it waits while it changes
            self.refresh()

    def after_step(self, version: int) -> dict[str, float]:
        self._refreshed()
        return self.inner.after_step(version)

    def on_start(self, version: int) -> None:
        self.inner.on_start(version)  # the copy was taken from the starting weights

    def on_resume(self, version: int) -> None:
        self._refreshed()  # the checkpoint's weights, loaded into the shards
        self.inner.on_resume(version)

    def rng_state(self) -> Any:
        return self.inner.rng_state()

    def set_rng_state(self, state: Any) -> None:
        self.inner.set_rng_state(state)

    def save_final(self, model: Any, tokenizer: Any, path: Path) -> None:
        self.inner.save_final(model, tokenizer, path)

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> Any:  # what callers read of the wrapped sync (engine, last probe, ...)
        return getattr(self.inner, name)
