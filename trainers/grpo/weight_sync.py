"""Getting new weights to the inference server after each optimizer step.

- `SharedEngineSync` (the default): the embedded engine runs in this process on the very
  model object being trained, so nothing is copied. The engine pauses between decoding
  steps while the optimizer writes the parameters, then the weight version is bumped and
  every later response reports it.
- `DiskReloadSync` (``base_url`` set): an external `vf-serve` (or any server with
  ``POST /weights/reload``) reloads a ``save_pretrained`` directory the trainer writes.
  It is the portable fallback; vLLM's NCCL weight transfer is not implemented yet.

Policy versions are the trainer's own count of optimizer steps (one per training step), so
they survive server restarts and resumes; the server is told the version with the weights.
"""

from __future__ import annotations

import contextlib
import json
import os
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from verifiers.errors import ConfigError, ServerError


class WeightSync(Protocol):
    model_name: str

    def make_client(self) -> Any: ...
    def updating(self) -> contextlib.AbstractContextManager[None]: ...
    def after_step(self, version: int) -> None: ...
    def on_resume(self, version: int) -> None: ...
    def rng_state(self) -> Any: ...
    def set_rng_state(self, state: Any) -> None: ...
    def save_final(self, model: Any, tokenizer: Any, path: Path) -> None: ...
    def close(self) -> None: ...


def _save(model: Any, tokenizer: Any, path: Path) -> None:
    target = model
    if hasattr(model, "merge_and_unload"):  # LoRA: serve/save the merged weights, keep training the adapter
        import copy

        target = copy.deepcopy(model).merge_and_unload()
    target.save_pretrained(path)
    tokenizer.save_pretrained(path)


class SharedEngineSync:
    def __init__(self, model: Any, tokenizer: Any, *, model_name: str, max_batch_size: int, seed: int) -> None:
        from verifiers.inference.engine import InferenceEngine

        self.model_name = model_name
        self.engine = InferenceEngine(model, tokenizer, max_batch_size=max_batch_size, seed=seed).start()

    def make_client(self) -> Any:
        # Environments get the engine without HTTP or the SDK pipeline in between (same API).
        from verifiers.inference.runner import EngineChatClient

        return EngineChatClient(self.engine, [self.model_name])

    @contextlib.contextmanager
    def updating(self) -> Iterator[None]:
        with self.engine.paused():
            yield

    def after_step(self, version: int) -> None:
        # The weights were updated in place (under `updating`); only the version changes.
        self.engine.weight_version = version

    def on_resume(self, version: int) -> None:
        self.engine.weight_version = version  # the shared model already holds the checkpoint

    def rng_state(self) -> Any:
        return self.engine._generator.get_state()

    def set_rng_state(self, state: Any) -> None:
        if state is not None:
            self.engine._generator.set_state(state)

    def save_final(self, model: Any, tokenizer: Any, path: Path) -> None:
        _save(model, tokenizer, path)

    def close(self) -> None:
        self.engine.stop()


class DiskReloadSync:
    def __init__(self, base_url: str, model: Any, tokenizer: Any, out: Path, *, model_name: str) -> None:
        self.base_url = base_url.rstrip("/")
        self.root = self.base_url[: -len("/v1")] if self.base_url.endswith("/v1") else self.base_url
        self.model, self.tokenizer = model, tokenizer
        self.dir = out / "sync_weights"
        self.model_name = model_name

    def make_client(self) -> Any:
        import verifiers as vf

        return vf.make_client(self.base_url)

    def updating(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def after_step(self, version: int) -> None:
        _save(self.model, self.tokenizer, self.dir)
        headers = {"Content-Type": "application/json"}
        key = os.environ.get("OPENAI_API_KEY")
        if key:  # a server started with --api-key guards /weights/reload too
            headers["Authorization"] = f"Bearer {key}"
        req = urllib.request.Request(
            f"{self.root}/weights/reload", data=json.dumps({"path": str(self.dir.resolve())}).encode(),
            headers=headers, method="POST",
        )
        try:
            with urllib.request.urlopen(req, timeout=600) as resp:
                resp.read()
        except OSError as exc:
            raise ServerError(f"weight reload at {self.root}/weights/reload failed: {exc}") from exc

    def on_resume(self, version: int) -> None:
        # The server may still hold newer (or, after a restart, the initial) weights: push ours.
        self.after_step(version)

    def rng_state(self) -> Any:
        return None

    def set_rng_state(self, state: Any) -> None:
        return None

    def save_final(self, model: Any, tokenizer: Any, path: Path) -> None:
        _save(model, tokenizer, path)

    def close(self) -> None:
        return None


def make_weight_sync(cfg: Any, model: Any, tokenizer: Any, out: Path) -> WeightSync:
    if cfg.base_url is None:
        return SharedEngineSync(model, tokenizer, model_name=cfg.server_model_name,
                                max_batch_size=cfg.engine_max_batch_size, seed=cfg.seed)
    if cfg.base_url.startswith("http"):
        return DiskReloadSync(cfg.base_url, model, tokenizer, out, model_name=cfg.server_model_name)
    raise ConfigError(f"base_url must be an http(s) URL, got {cfg.base_url!r}")
