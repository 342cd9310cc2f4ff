"""Starting N training processes: ``vf-train --num_processes N`` and ``accelerate launch --cpu``.

Both end in accelerate's own multi-process launcher (torchrun underneath), which starts N
processes that join one process group: NCCL on GPUs, gloo on the CPU.

``accelerate launch --cpu --num_processes N`` alone starts *one* process: accelerate leaves
several CPU processes to ``mpirun`` (``--mpirun_hostfile``) and only records, by setting
``MASTER_ADDR``, that more than one was asked for. The trainer would then silently train
alone. So when this process finds itself in that situation, it reads the launcher's own
arguments (its parent's command line, parsed by accelerate's parser) and relaunches itself
with N processes on this machine; without the count it stops with a message saying how to
launch instead.

FSDP: ``vf-train CONFIG --num_processes N --fsdp`` relaunches with accelerate's ``--use_fsdp``
and the settings of examples/accelerate/fsdp.yaml (FSDP2, each decoder layer a unit,
parameters resharded after forward, full state dicts); the processes then shard the model
(`trainers.grpo.learn.fsdp`). A ``--cpu`` launch of an FSDP config relaunches as FSDP too.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from verifiers.errors import ConfigError


def _truthy(value: str | None) -> bool:
    return (value or "").lower() in ("1", "true", "yes")


def _launcher_args(cmdline: Sequence[str]) -> Any:
    """An ``accelerate launch`` command line's arguments, via accelerate's own parser (None: not one)."""
    from accelerate.commands.launch import launch_command_parser

    for i, tok in enumerate(cmdline):
        if tok == "launch" or tok.endswith("accelerate.commands.launch") or tok.endswith("accelerate_cli.py"):
            rest = list(cmdline[i + 1 :])
            break
    else:
        return None
    try:
        args, _ = launch_command_parser().parse_known_args(rest)
    except SystemExit:
        return None
    return args


def _launcher_config(args: Any) -> Any:
    """The accelerate config file the launch names (``--config_file``), or None."""
    path = getattr(args, "config_file", None)
    if not path:
        return None
    from accelerate.commands.config.config_args import load_config_from_file

    try:
        return load_config_from_file(path)
    except Exception:  # unreadable: the launcher itself would have said so
        return None


def launcher_num_processes(cmdline: Sequence[str]) -> int | None:
    """``--num_processes`` of an ``accelerate launch`` command line (else its config file's)."""
    args = _launcher_args(cmdline)
    if args is None:
        return None
    if args.num_processes is not None:
        return args.num_processes
    config = _launcher_config(args)
    return getattr(config, "num_processes", None)


def launcher_wants_fsdp(cmdline: Sequence[str]) -> bool:
    """Whether an ``accelerate launch`` command line asks for FSDP (``--use_fsdp`` or an FSDP config file)."""
    args = _launcher_args(cmdline)
    if args is None:
        return False
    if getattr(args, "use_fsdp", False):
        return True
    config = _launcher_config(args)
    return str(getattr(config, "distributed_type", "")).endswith("FSDP")


def cpu_launch_request() -> tuple[int, bool] | None:
    """``(N, fsdp)`` when ``accelerate launch --cpu --num_processes N`` started only this process; else None.

    ``fsdp``: the launch asked for FSDP (``--use_fsdp`` or an FSDP config file), which
    accelerate's single-process CPU launcher does not pass on; the relaunch must.
    """
    env = os.environ
    if "WORLD_SIZE" in env or not _truthy(env.get("ACCELERATE_USE_CPU")) or "MASTER_ADDR" not in env:
        return None
    fsdp = False
    try:
        import psutil

        parent = psutil.Process().parent()
        cmdline = parent.cmdline() if parent is not None else []
        n = launcher_num_processes(cmdline)
        fsdp = launcher_wants_fsdp(cmdline)
    except Exception:  # no parent, no permission, an unfamiliar launcher: the count is unknown
        n = None
    if n is None:
        raise ConfigError(
            "accelerate launch --cpu with several processes starts only one (it expects mpirun); run "
            "`vf-train CONFIG --num_processes N` or `accelerate launch --multi_gpu --num_processes N ...` "
            "(on a machine without GPUs the processes use gloo on the CPU)"
        )
    return (n, fsdp) if n > 1 else None


def pop_num_processes(args: list[str]) -> int | None:
    """Remove ``--num_processes N`` from vf-train's arguments and return N."""
    for i, tok in enumerate(args):
        if tok == "--num_processes" or tok.startswith("--num_processes="):
            raw = tok.split("=", 1)[1] if "=" in tok else (args[i + 1] if i + 1 < len(args) else "")
            del args[i : i + (1 if "=" in tok else 2)]
            if not raw.isdigit() or int(raw) < 1:
                raise ConfigError(f"--num_processes needs a positive integer, got {raw!r}")
            return int(raw)
    return None


def pop_fsdp(args: list[str]) -> bool:
    """Remove vf-train's ``--fsdp`` flag; whether it was there."""
    if "--fsdp" not in args:
        return False
    args.remove("--fsdp")
    return True


FSDP_ARGS = ("--use_fsdp", "--fsdp_version", "2", "--fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP",
             "--fsdp_reshard_after_forward", "true", "--fsdp_state_dict_type", "FULL_STATE_DICT",
             "--fsdp_activation_checkpointing", "false")
"""accelerate's launch flags for examples/accelerate/fsdp.yaml's settings."""


def relaunch(num_processes: int, argv: Sequence[str], *, cpu: bool, fsdp: bool = False) -> int:
    """Run ``trainers.grpo.cli argv`` in ``num_processes`` processes on this machine; their exit code.

    ``fsdp``: the processes shard the model (accelerate's ``--use_fsdp`` with `FSDP_ARGS`).
    """
    from verifiers.inference.vllm.server import free_port

    env = dict(os.environ)
    for k in ("MASTER_ADDR", "MASTER_PORT", "ACCELERATE_USE_CPU"):
        env.pop(k, None)
    if cpu:
        env["CUDA_VISIBLE_DEVICES"] = ""  # every process on the CPU, joined over gloo
    port = str(free_port())
    mode = list(FSDP_ARGS) if fsdp or _truthy(env.get("ACCELERATE_USE_FSDP")) else ["--multi_gpu"]
    cmd = [sys.executable, "-m", "accelerate.commands.launch", *mode, "--num_processes",
           str(num_processes), "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
           "--main_process_ip", "127.0.0.1", "--main_process_port", port, "-m", "trainers.grpo.cli", *argv]
    return subprocess.call(cmd, env=env)
