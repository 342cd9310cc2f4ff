"""Fully sharded data parallel (FSDP2, ``torch.distributed.fsdp.fully_shard``), applied by the trainer.

Asked for the way accelerate asks: ``accelerate launch --config_file examples/accelerate/fsdp.yaml``
(``distributed_type: FSDP``) sets ``ACCELERATE_USE_FSDP=true`` and the ``FSDP_*`` variables in
every process; ``vf-train CONFIG --num_processes N --fsdp`` passes the same settings. The trainer
shards the model itself instead of leaving it to ``Accelerator.prepare``: on a machine without
GPUs accelerate 1.15 turns ``distributed_type: FSDP`` into plain multi-CPU data parallel (DDP,
every parameter replicated) without a word, while ``fully_shard`` itself runs on the CPU over
gloo. One code path for both devices is also the one tested here.

What is honoured: ``FSDP_VERSION`` (2 only), ``FSDP_AUTO_WRAP_POLICY`` (each decoder layer its
own unit, then the root; or the root alone), ``FSDP_RESHARD_AFTER_FORWARD``,
``FSDP_STATE_DICT_TYPE`` (full state dicts: checkpoints are written whole by rank 0, loadable
by any number of processes), ``FSDP_OFFLOAD_PARAMS`` (on GPUs). Not used:
``FSDP_CPU_RAM_EFFICIENT_LOADING`` (every rank loads the whole model: it keeps a full copy
anyway, `whole_loading`). Refused with the fix:
FSDP1, size-based wrapping, sharded state dicts and FSDP's activation checkpointing (the
config's ``gradient_checkpointing`` does that).

Every FSDP forward and backward is a collective (each unit all-gathers its parameters), so
every rank must run the same number of them; the learner pads a rank's micro-batches to the
largest count (`even_parts`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any, Literal

import torch
from pydantic import BaseModel

from verifiers.errors import ConfigError

Wrap = Literal["TRANSFORMER_BASED_WRAP", "NO_WRAP"]


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes")


class FSDPSettings(BaseModel):
    """The FSDP settings of a launch (accelerate's ``FSDP_*`` environment)."""

    wrap: Wrap = "TRANSFORMER_BASED_WRAP"
    layer_classes: list[str] = []  # FSDP_TRANSFORMER_CLS_TO_WRAP; empty: the model's decoder layer class
    reshard_after_forward: bool = True
    offload_params: bool = False


def requested() -> bool:
    """Whether this launch asked for FSDP (``distributed_type: FSDP`` or ``vf-train --fsdp``)."""
    return _truthy(os.environ.get("ACCELERATE_USE_FSDP"))


def settings_from_env(env: dict[str, str] | None = None) -> FSDPSettings:
    """The launch's FSDP settings; a setting the trainer cannot honour is refused with its fix."""
    env = dict(os.environ) if env is None else env
    version = env.get("FSDP_VERSION", "2").strip()
    if version != "2":
        raise ConfigError(f"FSDP_VERSION={version}: the trainer shards with FSDP2 (fully_shard) only; "
                          "set fsdp_version: 2 in the accelerate config")
    wrap = env.get("FSDP_AUTO_WRAP_POLICY", "TRANSFORMER_BASED_WRAP").strip().upper() or "TRANSFORMER_BASED_WRAP"
    if wrap not in ("TRANSFORMER_BASED_WRAP", "NO_WRAP"):
        raise ConfigError(f"fsdp_auto_wrap_policy {wrap} is not supported: use TRANSFORMER_BASED_WRAP (each "
                          "decoder layer its own unit, the usual choice) or NO_WRAP (the whole model one unit)")
    state_dict = env.get("FSDP_STATE_DICT_TYPE", "FULL_STATE_DICT").strip().upper()
    if state_dict not in ("FULL_STATE_DICT", ""):
        raise ConfigError(f"fsdp_state_dict_type {state_dict}: checkpoints are written whole by rank 0 (so any "
                          "number of processes can resume them); set fsdp_state_dict_type: FULL_STATE_DICT")
    if _truthy(env.get("FSDP_ACTIVATION_CHECKPOINTING")):
        raise ConfigError("fsdp_activation_checkpointing is not applied by the trainer: set "
                          "gradient_checkpointing = true in the training config instead and "
                          "fsdp_activation_checkpointing: false")
    classes = [c.strip() for c in env.get("FSDP_TRANSFORMER_CLS_TO_WRAP", "").split(",") if c.strip()]
    return FSDPSettings(wrap=wrap, layer_classes=classes,  # type: ignore[arg-type]
                        reshard_after_forward=_truthy(env.get("FSDP_RESHARD_AFTER_FORWARD", "true")),
                        offload_params=_truthy(env.get("FSDP_OFFLOAD_PARAMS")))


@contextlib.contextmanager
def whole_loading() -> Iterator[None]:
    """Every rank loads the whole checkpoint (``fsdp_cpu_ram_efficient_loading`` switched off meanwhile).

    With it on, transformers loads the weights on rank 0 only and leaves the other ranks'
    uninitialised, for FSDP to broadcast; but every rank needs the whole weights anyway, for
    the engine's and the sync's full copy, and shards them itself.
    """
    key = "FSDP_CPU_RAM_EFFICIENT_LOADING"
    before = os.environ.get(key)
    os.environ[key] = "false"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = before


def decoder_layers(model: torch.nn.Module, classes: list[str]) -> list[torch.nn.Module]:
    """The modules sharded as their own units: instances of ``classes`` or of the model's
    ``_no_split_modules`` (transformers' decoder layer class), in order."""
    names = set(classes) or set(getattr(model, "_no_split_modules", None) or [])
    if not names:
        raise ConfigError(f"{type(model).__name__} names no decoder layer class (_no_split_modules); set "
                          "fsdp_transformer_layer_cls_to_wrap in the accelerate config")
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        raise ConfigError(f"no module of class {sorted(names)} in {type(model).__name__}: check "
                          "fsdp_transformer_layer_cls_to_wrap")
    return layers


def broadcast_from_rank0(model: torch.nn.Module) -> None:
    """Every rank takes rank 0's weights and buffers (DDP does the same when it wraps a model).

    Anything initialised randomly after loading (LoRA's ``lora_A``) would otherwise differ per
    rank, since the ranks' random streams do not agree (rank 0 alone builds vf-tiny, for one);
    ``fully_shard`` keeps each rank's own values, so the sharded model would be a patchwork.
    """
    with torch.no_grad():
        for tensor in model.state_dict().values():
            torch.distributed.broadcast(tensor, src=0)


def shard(model: torch.nn.Module, settings: FSDPSettings, device: torch.device) -> torch.nn.Module:
    """``fully_shard`` each decoder layer, then the root (which holds embeddings, final norm and head).

    Parameters become DTensors sharded on dim 0 over every process; an optimizer must be built
    on them afterwards (the objects change).
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy, fully_shard

    model.to(device)
    mesh = init_device_mesh(device.type, (torch.distributed.get_world_size(),))
    offload = CPUOffloadPolicy() if settings.offload_params and device.type != "cpu" else OffloadPolicy()
    if settings.wrap == "TRANSFORMER_BASED_WRAP":
        for layer in decoder_layers(model, settings.layer_classes):
            fully_shard(layer, mesh=mesh, reshard_after_forward=settings.reshard_after_forward,
                        offload_policy=offload)
    # The root (embeddings, final norm, head) keeps FSDP2's own default: gathered from its forward
    # until its backward. The learner applies the head to the decoder's hidden states itself,
    # after the forward (chunked log-softmax, `trainers.grpo.learn.logprobs`), which needs it whole.
    root_reshard = None if settings.wrap == "TRANSFORMER_BASED_WRAP" else settings.reshard_after_forward
    if root_reshard:
        raise ConfigError("fsdp_auto_wrap_policy NO_WRAP with fsdp_reshard_after_forward: true would free the LM "
                          "head after the forward, before the learner applies it; set fsdp_reshard_after_forward: "
                          "false or use TRANSFORMER_BASED_WRAP")
    fully_shard(model, mesh=mesh, reshard_after_forward=root_reshard, offload_policy=offload)
    return model


def full_state_dict(model: torch.nn.Module, *, rank0_only: bool = False) -> dict[str, torch.Tensor]:
    """The model's whole weights, gathered in one pass over its parameters (a collective: every rank calls it).

    ``rank0_only``: on the CPU, on rank 0 only (the others get ``{}``), for checkpoints;
    otherwise on every rank, where the weights live.
    """
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    opts = StateDictOptions(full_state_dict=True, cpu_offload=rank0_only)
    return get_model_state_dict(model, options=opts)


def gather_into(model: torch.nn.Module, full: torch.nn.Module) -> None:
    """Copy the sharded ``model``'s weights into ``full``, a whole copy of it (a collective: every rank calls it).

    One pass over the parameters, each gathered (``DTensor.full_tensor``) and copied at once, so
    at most one whole parameter exists beside the copy (a full state dict would hold them all).
    Buffers are not sharded and not trained: the copy has its own.
    """
    targets = dict(full.named_parameters())
    with torch.no_grad():
        for name, param in model.named_parameters():
            whole = param.full_tensor() if hasattr(param, "full_tensor") else param
            targets[name].copy_(whole)


def load_full_state_dict(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Load whole weights (every rank holds them) into the sharded model: each rank keeps its shard."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True, strict=True))


def full_optimizer_state(model: torch.nn.Module, optimizer: Any, params: list[torch.nn.Parameter]) -> dict[str, Any]:
    """The optimizer's whole state on rank 0 (``{}`` elsewhere), in ``optimizer.state_dict()``'s
    own layout (parameters by their index in ``params``): a checkpoint of a sharded run then
    loads into one process exactly like a single process's."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
    by_name = get_optimizer_state_dict(model, _inner(optimizer), options=opts)
    if not by_name:
        return {}
    index = {name: i for i, name in enumerate(trained_names(model, params))}
    return {
        "state": {index[name]: s for name, s in by_name["state"].items()},
        "param_groups": [{**g, "params": [index[n] for n in g["params"]]} for g in by_name["param_groups"]],
    }


def load_full_optimizer_state(model: torch.nn.Module, optimizer: Any, params: list[torch.nn.Parameter],
                              state: dict[str, Any]) -> None:
    """Load `full_optimizer_state`'s layout (or a single process's ``optimizer.state_dict()``) into
    the optimizer of the sharded model: each rank keeps its shard of every moment."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    names = trained_names(model, params)
    by_name = {
        "state": {names[int(i)]: s for i, s in state["state"].items()},
        "param_groups": [{**g, "params": [names[int(i)] for i in g["params"]]} for g in state["param_groups"]],
    }
    set_optimizer_state_dict(model, _inner(optimizer), by_name, options=StateDictOptions(full_state_dict=True))


def trained_names(model: torch.nn.Module, params: list[torch.nn.Parameter]) -> list[str]:
    """The names of ``params`` (the optimizer's parameters, in its order)."""
    names = {id(p): n for n, p in model.named_parameters()}
    return [names[id(p)] for p in params]


def _inner(optimizer: Any) -> torch.optim.Optimizer:
    """The torch optimizer inside accelerate's wrapper."""
    return getattr(optimizer, "optimizer", optimizer)
