"""Getting new weights to the inference server after each optimizer step.

- `SharedEngineSync` (the default): the embedded engine runs in this process on the very
  model object being trained, so nothing is copied. The engine pauses between decoding
  steps while the optimizer writes the parameters, then the weight version is bumped and
  every later response reports it.
- `DiskReloadSync` (``base_url`` is a `vf-serve`): the server reloads a ``save_pretrained``
  directory the trainer writes (``POST /weights/reload``).
- `trainers.grpo.sync.vllm.VLLMSync` (``base_url`` is vLLM, or ``[vllm]`` managed servers):
  checkpoint reload, NCCL weight transfer or LoRA adapter, verified by a logprob probe.

Policy versions are the trainer's own count of optimizer steps (one per training step), so
they survive server restarts and resumes; the server is told the version with the weights.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

from trainers.grpo.sync.base import ExternalServerSync, save_merged
from verifiers.clients import make_client
from verifiers.clients.balanced import ChatTarget
from verifiers.errors import ConfigError, ServerError


class WeightSync(Protocol):
    model_name: str

    def make_client(self) -> Any: ...
    def updating(self) -> contextlib.AbstractContextManager[None]: ...
    def after_step(self, version: int) -> dict[str, float]: ...
    def on_start(self, version: int) -> None: ...
    def on_resume(self, version: int) -> None: ...
    def rng_state(self) -> Any: ...
    def set_rng_state(self, state: Any) -> None: ...
    def save_final(self, model: Any, tokenizer: Any, path: Path) -> None: ...
    def close(self) -> None: ...


class SharedEngineSync:
    def __init__(self, model: Any, tokenizer: Any, *, model_name: str, max_batch_size: int, seed: int,
                 max_kv_tokens: int | None = None, autocast: str | None = None) -> None:
        from verifiers.inference.engine import InferenceEngine

        self.model_name = model_name
        self.engine = InferenceEngine(model, tokenizer, max_batch_size=max_batch_size, seed=seed,
                                      max_kv_tokens=max_kv_tokens, autocast=autocast).start()

    def make_client(self) -> Any:
        # Environments get the engine without HTTP or the SDK pipeline in between (same API).
        from verifiers.inference.server.runner import EngineChatClient

        return EngineChatClient(self.engine, [self.model_name])

    @contextlib.contextmanager
    def updating(self) -> Iterator[None]:
        with self.engine.paused():
            yield

    def after_step(self, version: int) -> dict[str, float]:
        # The weights were updated in place (under `updating`); only the version changes.
        self.engine.weight_version = version
        return {}

    def on_start(self, version: int) -> None:
        return None  # the engine decodes the very model being trained

    def on_resume(self, version: int) -> None:
        self.engine.weight_version = version  # the shared model already holds the checkpoint

    def rng_state(self) -> Any:
        return self.engine.rng_state()

    def set_rng_state(self, state: Any) -> None:
        if state is not None:
            self.engine.set_rng_state(state)

    def save_final(self, model: Any, tokenizer: Any, path: Path) -> None:
        save_merged(model, tokenizer, path)

    def close(self) -> None:
        self.engine.stop()


class DiskReloadSync(ExternalServerSync):
    def __init__(self, base_url: str, model: Any, tokenizer: Any, out: Path, *, model_name: str) -> None:
        self.base_url = base_url.rstrip("/")
        self.root = self.base_url[: -len("/v1")] if self.base_url.endswith("/v1") else self.base_url
        self.model, self.tokenizer = model, tokenizer
        self.dir = out / "sync_weights"
        self.model_name = model_name

    def make_client(self) -> Any:
        return make_client(self.base_url)

    def targets(self) -> list[ChatTarget]:
        """The server as rollout clients reach it (also Ray workers, which build their own)."""
        return [ChatTarget(self.base_url, self.model_name)]

    def updating(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def after_step(self, version: int) -> dict[str, float]:
        save_merged(self.model, self.tokenizer, self.dir)
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
        except (OSError, http.client.HTTPException) as exc:  # HTTPException: cut off mid-answer (IncompleteRead)
            raise ServerError(f"weight reload at {self.root}/weights/reload failed: {exc}") from exc
        return {}

    def on_start(self, version: int) -> None:
        return None  # vf-serve was started on the same checkpoint (its reload validates shapes)


def probe_tolerance(cfg: Any, model: Any) -> float:
    """How far served logprobs may sit from the trainer's after a sync: the looser of what the
    trainer computes in and what the server computes in.

    The trainer keeps float32 master weights by default, but vLLM serves the checkpoint's dtype
    (bf16 for most published models): a 1e-3 float32 tolerance would fail every sync.
    """
    from trainers.grpo.sync.probe import default_tolerance
    from verifiers.inference.vllm.server import checkpoint_dtype

    if cfg.sync_verify_tol is not None:
        return float(cfg.sync_verify_tol)
    dtypes = {str(next(model.parameters()).dtype)}
    if cfg.mixed_precision == "bf16":
        dtypes.add("bfloat16")
    config = Path(cfg.model) / "config.json"
    if config.is_file():
        dtypes.add(checkpoint_dtype(json.loads(config.read_text())))
    return max(default_tolerance(d) for d in dtypes)


def check_served_model(urls: list[str], model_name: str) -> None:
    """vf-eval's endpoint check, before the first rollout: a model name the server does not serve
    would otherwise surface as every rollout failing (and, before, as "no token ids")."""
    from verifiers.errors import EndpointCheckError
    from verifiers.eval.endpoints import Endpoint
    from verifiers.eval.preflight import check_endpoint

    fix = (f"set server_model_name (--server_model_name NAME) to the name the server serves, or start it "
           f"with --served-model-name {model_name}")
    for url in urls:
        try:
            check_endpoint(Endpoint(model=model_name, base_url=url), model_fix=fix)
        except EndpointCheckError as exc:
            raise ConfigError(f"base_url {url}: {exc}") from None


def engine_autocast(cfg: Any, model: Any) -> str | None:
    """The embedded engine's autocast: bf16 on a GPU when the learner trains under bf16 autocast.

    Sampling in the learner's precision shrinks the sampler-vs-learner gap (the Quickstart on CPU:
    mean 4e-3 -> 8e-4) and on a GPU makes decoding's products bf16 tensor-core ones. On a CPU the
    engine keeps float32: its oneDNN-packed float32 products are faster there than bf16 ones, and the
    smaller gap did not make learning more reliable (docs/training.md, Precision).
    """
    on_gpu = next(model.parameters()).device.type == "cuda"
    return "bfloat16" if cfg.mixed_precision == "bf16" and on_gpu else None


def make_weight_sync(cfg: Any, model: Any, tokenizer: Any, out: Path, urls: list[str] | None = None,
                     log: Callable[[str], None] = print, dist: Any = None) -> WeightSync:
    """The sync for this run: embedded engine, a vf-serve, or vLLM server(s) (``urls``: managed ones).

    ``dist`` (a `Dist`) with several processes: against vLLM, rank 0 alone pushes and verifies
    while the others wait (`trainers.grpo.sync.ranked.OneWriterSync`).
    """
    several = dist is not None and dist.active
    urls = urls if urls is not None else cfg.base_urls
    if not urls:
        return SharedEngineSync(model, tokenizer, model_name=cfg.server_model_name,
                                max_batch_size=cfg.engine_max_batch_size, seed=cfg.seed,
                                max_kv_tokens=cfg.engine_max_kv_tokens,
                                autocast=engine_autocast(cfg, model))
    for u in urls:
        if not u.startswith(("http://", "https://")):
            raise ConfigError(f"base_url must be an http(s) URL, got {u!r}")
    kind = cfg.server_type
    if kind == "auto":
        from verifiers.inference.vllm.admin import VLLMAdmin

        down = [u for u in urls if not VLLMAdmin(u).healthy()]
        if down:
            raise ConfigError(f"no server answers /health at {', '.join(down)}: start it first "
                              "(vf-vllm MODEL_DIR --port PORT, or vf-serve), or use [vllm] to let vf-train start one")
        kinds = {"vllm" if VLLMAdmin(u).is_vllm() else "vf-serve" for u in urls}
        if len(kinds) > 1:
            raise ConfigError(f"base_url mixes vLLM and other servers ({urls}); use replicas of one kind")
        kind = kinds.pop()
    check_served_model(urls, cfg.server_model_name)
    if kind == "vf-serve":
        if several:
            raise ConfigError(f"{dist.world_size} training processes against a vf-serve server are not supported: "
                              "serve the policy with vLLM (vf-vllm, or [vllm]), or train in one process")
        if len(urls) > 1:
            raise ConfigError("several base_urls need vLLM servers (vf-serve replicas are not supported for training)")
        if cfg.weight_sync not in ("auto", "reload"):
            raise ConfigError(f"weight_sync = {cfg.weight_sync!r} needs vLLM; vf-serve reloads checkpoints")
        return DiskReloadSync(urls[0], model, tokenizer, out, model_name=cfg.server_model_name)
    from trainers.grpo.sync.vllm import VLLMSync

    transport = cfg.weight_sync
    if transport == "auto":
        # A checkpoint in /dev/shm is the safe default on one machine (NCCL cannot join two ranks
        # on one GPU, and needs the trainer on a GPU); servers elsewhere need NCCL.
        on_gpu = next(model.parameters()).device.type == "cuda"
        remote = any(urllib.parse.urlparse(u).hostname not in ("127.0.0.1", "localhost", "::1") for u in urls)
        transport = "nccl" if on_gpu and remote else "reload"
    sync = VLLMSync(urls, model, tokenizer, out, model_name=cfg.server_model_name, transport=transport,
                    sync_dir=cfg.sync_dir, verify=cfg.sync_verify, tolerance=probe_tolerance(cfg, model),
                    pause=cfg.num_batches_ahead > 0, nccl_port=cfg.nccl_port,
                    nccl_address=cfg.nccl_address, log=log)
    if not several:
        return sync
    from trainers.grpo.sync.ranked import OneWriterSync

    return OneWriterSync(sync, dist, model)
