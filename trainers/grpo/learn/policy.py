"""The policy being trained: model, reference model, LoRA, AdamW, scheduler and accelerate.

`build_policy` loads and wraps everything in the order the run needs (seeded before it is
called); `Policy` holds the pieces and the few things done with them at every step: the
reference model, the precision of the forward passes, DDP's (or FSDP's) backward and the
gradient norm.

Under FSDP (`trainers.grpo.learn.fsdp`) the trained model's parameters are shards, so what
needs whole weights (the embedded engine, the weight sync to vLLM, the final model) reads a
full copy, the ``mirror``, refreshed by one gather after each optimizer step (`refresh_mirror`).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from trainers.grpo.algo.algorithms import AlgorithmPreset
from trainers.grpo.dist.ranks import Dist
from verifiers.errors import ConfigError


def resolve_model_path(cfg: Any, out: Path, dist: Dist, log: Callable[[str], None]) -> str:
    """The model directory: vf-tiny built into ``out/base_model``, a directory, or a Hub id fetched
    into the cache (rank 0 first, the other ranks then load what it wrote)."""
    from verifiers.models.tiny import TinyModelSpec, save_tiny_model

    path = cfg.model
    if path == "tiny":
        path = str(out / "base_model")
        with dist.main_first():
            if dist.is_main and not (Path(path) / "config.json").is_file():
                save_tiny_model(path, TinyModelSpec(**cfg.tiny_model.model_dump()))
        return path
    from verifiers.models.source import resolve_model

    with dist.main_first():
        return str(resolve_model(path, log=log))


class Policy:
    """The trained model and what updates it (built by `build_policy`)."""

    def __init__(self, cfg: Any, dist: Dist, *, model: Any, ref_model: Any, tokenizer: Any,
                 params: list[torch.nn.Parameter], optimizer: Any, scheduler: Any, accelerator: Any,
                 fsdp: Any = None, mirror: Any = None) -> None:
        self.cfg = cfg
        self.dist = dist
        self.model = model  # the prepared (under DDP: wrapped) model
        self.ref_model = ref_model  # None with LoRA (the adapters switched off) or without KL
        self.tokenizer = tokenizer
        self.params = params
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.accelerator = accelerator
        self.device = accelerator.device
        self.fsdp = fsdp  # FSDPSettings when the model is sharded (`trainers.grpo.learn.fsdp`)
        self.mirror = mirror  # FSDP: a full, untrained copy of the weights for the engine and the sync

    @property
    def sharded(self) -> bool:
        return self.fsdp is not None

    def served(self) -> Any:
        """The model whose whole weights are sampled from and synced: the mirror under FSDP."""
        return self.mirror if self.sharded else self.unwrapped()

    def refresh_mirror(self) -> None:
        """FSDP: gather the trained weights into the mirror (a collective: every rank calls it)."""
        if not self.sharded:
            return
        from trainers.grpo.learn.fsdp import gather_into

        gather_into(self.model, self.mirror)

    def clip_grad_norm(self, max_norm: float | None) -> float:
        """The global gradient norm (clipped to ``max_norm`` when given).

        Under FSDP the gradients are DTensor shards: torch's ``clip_grad_norm_`` reduces each
        shard's norm over the ranks, so the norm (and the clip) is the whole model's.
        """
        if self.sharded:
            gn = torch.nn.utils.clip_grad_norm_(self.params, float("inf") if max_norm is None else max_norm)
            full = getattr(gn, "full_tensor", None)
            return float(full() if full is not None else gn)
        if max_norm is not None:
            return float(self.accelerator.clip_grad_norm_(self.params, max_norm))
        return float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in self.params if p.grad is not None])))

    def unwrapped(self) -> Any:
        """The transformers (or peft) model inside any DDP wrapper."""
        return self.accelerator.unwrap_model(self.model)

    def release_process_group(self) -> None:
        """Drop every hold on the process group before it is destroyed (end of a multi-process run).

        The DDP wrapper's reducer keeps the gloo group alive after ``destroy_process_group``;
        left to interpreter shutdown, its worker threads are torn down with the interpreter and a
        rank can abort ("terminate called without an active exception", SIGABRT) after a run
        that succeeded. Unwrapped here, and accelerate's own list of prepared objects cleared,
        the wrapper is collected while Python still runs. The unwrapped model stays usable.
        """
        if self.sharded:
            return
        self.model = self.unwrapped()
        self.accelerator.free_memory()  # accelerate's references to the wrapper, then a gc pass

    @contextlib.contextmanager
    def reference(self, updating: Callable[[], contextlib.AbstractContextManager[Any]]) -> Iterator[Any]:
        """The reference model; with LoRA the policy with its adapters off, under ``updating``."""
        if self.ref_model is not None:
            yield self.ref_model
        else:  # LoRA: the base model is the policy with its adapters switched off
            # An embedded engine decoding ahead shares this model: it waits while the adapters are
            # off, or its samples would come from the base model tagged with the policy's version.
            with updating(), self.unwrapped().disable_adapter():
                yield self.model

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """bf16 autocast of the forward passes when ``mixed_precision = "bf16"`` (weights stay float32)."""
        if self.cfg.mixed_precision != "bf16":
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)

    def backward(self, loss: torch.Tensor, *, last: bool) -> None:
        """Backward of one micro-batch; under DDP gradients are all-reduced on the ``last`` one only.

        Each rank's loss is its share of the global loss (global normaliser), and DDP averages
        gradients over ranks, so the loss is scaled by the world size: the reduced gradient is
        then the one a single process gets on the union batch. FSDP averages too, but reduces
        (reduce-scatter) after every micro-batch: skipping it would keep whole, unsharded
        gradients alive between micro-batches, the memory sharding is there to save; the sum of
        the reduced shares is the same gradient.
        """
        if self.dist.active:
            loss = loss * self.dist.world_size
        if self.sharded:
            loss.backward()
            return
        with contextlib.nullcontext() if last else self.accelerator.no_sync(self.model):
            self.accelerator.backward(loss)

    def share_prompts(self) -> bool:
        """Whether the learner may run each group's prompt once (not with gradient checkpointing).

        The flag lives on the transformers model, not on a DDP wrapper, so it is read from the
        unwrapped module (``completion_logps`` only sees the wrapper it is given).
        """
        if self.sharded:  # the shared-prompt path runs a data-dependent number of passes; FSDP needs equal counts
            return False
        lm = self.unwrapped()
        flags = ("is_activation_checkpointing", "is_gradient_checkpointing")
        return not any(bool(getattr(lm, f, False)) for f in flags)


def build_policy(cfg: Any, preset: AlgorithmPreset, model_path: str, dist: Dist) -> Policy:
    """Load the model (float32 by default), add the reference copy or LoRA, AdamW and the schedule."""
    from trainers.grpo.learn.fsdp import whole_loading
    from verifiers.inference.engine.loading import load_model_and_tokenizer
    from verifiers.models.chat_templates import resolve_chat_template, use_chat_template

    # float32 by default whatever the checkpoint holds: Adam updates of a 16-bit weight
    # round away unless they exceed half its last bit (see docs/training.md, "Precision").
    with whole_loading():  # under FSDP every rank needs the whole weights (see `whole_loading`)
        model, tokenizer = load_model_and_tokenizer(model_path, dtype=cfg.dtype)
    # the chat template every prompt of the run is rendered with (the engine shares this tokenizer)
    use_chat_template(tokenizer, resolve_chat_template(model_path if cfg.model == "tiny" else cfg.model,
                                                       cfg.chat_template)[0])
    model.eval()  # no dropout: the sampler and the learner must see the same function
    fsdp = fsdp_settings(cfg, dist)
    ref_model = None
    if preset.uses_reference and not cfg.lora:
        ref_model = copy.deepcopy(model).requires_grad_(False)
    if cfg.lora:
        from peft import get_peft_model

        from trainers.grpo.learn.lora import lora_config

        model = get_peft_model(model, lora_config(cfg, model))
    if cfg.gradient_checkpointing:  # the old name is deprecated in transformers 5
        enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        enable()
    mirror = None
    if fsdp is not None:  # shard last, once the modules are final; the optimizer is built on the shards
        from trainers.grpo.learn.fsdp import broadcast_from_rank0, shard

        broadcast_from_rank0(model)  # e.g. LoRA's random lora_A: every rank shards the same values
        mirror = copy.deepcopy(model).requires_grad_(False).to(dist.device)
        model = shard(model, fsdp, dist.device)
        if ref_model is not None:  # sharded too: a full reference per rank would cost what sharding saves
            ref_model = shard(ref_model, fsdp, dist.device)
    params = [p for p in model.parameters() if p.requires_grad]
    # The fused kernel: one pass per tensor instead of a dozen ops (5x faster on a CPU at 25M
    # parameters, same update to float rounding); FSDP's DTensor shards keep the default.
    fused = fsdp is None and all(p.device.type in ("cpu", "cuda") for p in params)
    optimizer = torch.optim.AdamW(
        params, lr=cfg.learning_rate, betas=(cfg.adam_beta1, cfg.adam_beta2), weight_decay=cfg.weight_decay,
        fused=fused or None,
    )
    from accelerate import Accelerator
    from transformers import get_scheduler

    scheduler = get_scheduler(
        cfg.lr_scheduler, optimizer, num_warmup_steps=cfg.warmup_steps,
        num_training_steps=cfg.max_steps * cfg.num_iterations,
    )
    # Device placement and (under `accelerate launch`) DDP wrapping. Gradient accumulation is
    # ours: each micro-batch loss is already its share of the step loss, so no rescaling.
    # mixed_precision "no" even when an accelerate config says otherwise: accelerate's autocast
    # wrapper would also upcast every output to float32, i.e. the full [rows, tokens, vocab]
    # logits; the policy applies its own autocast (`Policy.autocast`) where it is wanted.
    accelerator = Accelerator(cpu=not torch.cuda.is_available(), mixed_precision="no",
                              kwargs_handlers=_ddp_kwargs())
    # The scheduler is not prepared: accelerate's wrapper would step it once per process at
    # every optimizer step (it assumes a batch per process); here it steps once per step.
    if fsdp is not None:  # sharded above; accelerate's prepare would wrap it again (or, on CPUs, in DDP)
        return Policy(cfg, dist, model=model, ref_model=ref_model, tokenizer=tokenizer, params=params,
                      optimizer=optimizer, scheduler=scheduler, accelerator=accelerator, fsdp=fsdp, mirror=mirror)
    prepared, optimizer = accelerator.prepare(model, optimizer)
    if ref_model is not None:
        ref_model.to(accelerator.device)
    return Policy(cfg, dist, model=prepared, ref_model=ref_model, tokenizer=tokenizer, params=params,
                  optimizer=optimizer, scheduler=scheduler, accelerator=accelerator)


def fsdp_settings(cfg: Any, dist: Dist) -> Any:
    """The launch's FSDP settings when it asked for FSDP with several processes; else None (one
    process trains its whole model whatever the launch config says)."""
    from trainers.grpo.learn import fsdp

    if not (fsdp.requested() and dist.active):
        return None
    if cfg.ray is not None:
        raise ConfigError("[ray] rollouts with FSDP are not supported: the Ray path serves the trainer's own model, "
                          "which FSDP shards; use DDP (drop --fsdp / use examples/accelerate/ddp.yaml) or no [ray]")
    return fsdp.settings_from_env()


def _ddp_kwargs() -> list[Any]:
    """DDP without buffer broadcasts: each one is a collective inside every forward pass, and
    ranks run different numbers of forwards (micro-batches follow their own rows), which would
    deadlock; the buffers (rotary tables) are not trained and are equal on every rank anyway."""
    import warnings

    from accelerate.utils import DistributedDataParallelKwargs

    # torch >= 2.10 suggests forward_sync_buffers, which accelerate cannot pass on yet
    warnings.filterwarnings("ignore", message="`broadcast_buffers` is deprecated", category=FutureWarning)
    return [DistributedDataParallelKwargs(broadcast_buffers=False)]
