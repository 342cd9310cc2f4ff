"""``vf-train CONFIG.toml [--key value ...] [--resume [CHECKPOINT]]``.

Several processes (data parallel; an embedded engine per process, or vLLM servers that rank 0
starts with ``[vllm]`` and alone pushes weights to): ``accelerate launch
--multi_gpu --num_processes N -m trainers.grpo.cli CONFIG.toml``, ``accelerate launch --cpu
--num_processes N ...`` or ``vf-train CONFIG.toml --num_processes N`` (both relaunch through
accelerate, `trainers.grpo.dist.launch`); ``prompts_per_step`` is the global number of prompts and
must be divisible by N. Sharded (FSDP2): ``accelerate launch --config_file
examples/accelerate/fsdp.yaml ...`` or ``vf-train CONFIG.toml --num_processes N --fsdp``
(`trainers.grpo.learn.fsdp`). Rollouts on Ray: ``[ray]`` in the config (docs/scaling.md).
"""

from __future__ import annotations

import json
import os
import sys


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(
            "usage: vf-train CONFIG.toml [--key value ...] [--resume [CHECKPOINT_DIR] | --overwrite] [--num_processes N [--fsdp]]\n"
            "  several GPUs: accelerate launch --multi_gpu --num_processes N -m trainers.grpo.cli CONFIG.toml\n"
            "  against vLLM: --base_url http://127.0.0.1:8000/v1[,http://...] (servers from vf-vllm), or [vllm] in the config\n"
            "  every TrainConfig field can be overridden, e.g. --learning_rate 1e-4 --tiny_model.hidden_size 128\n"
            "  examples: examples/configs/*.toml; fields: docs/training.md"
        )
        return 0 if args else 2
    from verifiers.errors import ConfigError

    try:  # several processes: relaunch this command under accelerate (trainers/grpo/dist/launch.py)
        from trainers.grpo.dist.launch import cpu_launch_request, pop_fsdp, pop_num_processes, relaunch

        n, cpu, fsdp = pop_num_processes(args), False, pop_fsdp(args)
        if n is None:
            request = cpu_launch_request()
            if request is not None:
                (n, fsdp), cpu = request, True
        if fsdp and (n is None or n < 2):
            raise ConfigError("--fsdp shards the model over several processes: add --num_processes N (N >= 2)")
    except ConfigError as exc:
        print(f"vf-train: {exc}", file=sys.stderr)
        return 2
    if n is not None and n > 1 and "WORLD_SIZE" not in os.environ:
        return relaunch(n, args, cpu=cpu, fsdp=fsdp)
    resume: str | bool = False
    if "--resume" in args:
        i = args.index("--resume")
        if i + 1 < len(args) and not args[i + 1].startswith("--"):
            resume = args[i + 1]
            del args[i : i + 2]
        else:
            resume = True
            del args[i]
    if "--overwrite" in args:  # a bare flag, like --resume: write into a non-empty output_dir
        args.remove("--overwrite")
        args += ["--overwrite_output_dir", "true"]
    path, overrides = (None, args) if args[0].startswith("--") else (args[0], args[1:])
    from verifiers.cli.quiet import quiet_libraries
    from verifiers.errors import RubricError, ServerError

    quiet_libraries()

    try:
        from trainers.grpo.config import load_config

        cfg = load_config(path, overrides)
        from transformers.utils import logging as hf_logging

        from trainers.grpo.trainer import GRPOTrainer

        hf_logging.disable_progress_bar()  # per-file load/save bars would bury the training progress

        summary = GRPOTrainer(cfg).train(resume=resume)
    except ConfigError as exc:
        print(f"vf-train: {exc}", file=sys.stderr)
        return 2
    except (ServerError, RubricError) as exc:  # the server died, or the rewards are broken
        print(f"vf-train: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # the RL loop handles its own; this is setup or the SFT warm-up
        print("vf-train: interrupted before the first RL step (setup or SFT warm-up); nothing was saved, "
              "so a new run starts from the beginning", file=sys.stderr)
        return 130
    except ImportError as exc:
        from verifiers.cli.extras import exit_for_missing_extra

        return exit_for_missing_extra("vf-train", exc)
    from trainers.grpo.dist.ranks import is_main_process

    if is_main_process():  # under accelerate launch every rank returns the same summary
        print(json.dumps(summary.__dict__))
    return 130 if summary.interrupted else 0


if __name__ == "__main__":
    raise SystemExit(main())
