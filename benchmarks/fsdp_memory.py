"""Memory per training process: 1 process vs 2 DDP processes vs 2 FSDP processes (gloo, CPU).

    python benchmarks/fsdp_memory.py                    # ~2-3 minutes on 2 cores
    python benchmarks/fsdp_memory.py --hidden 512 --layers 8 --steps 2

Each mode runs the real trainer (the Quickstart, letter-repeat, ``--steps`` GRPO steps) on a
vf-tiny model large enough that parameters and Adam state dominate (default hidden 512, 8
layers, ~27M parameters; the tiny vocabulary keeps the logits small):

* ``one``: ``python -m trainers.grpo.cli`` in one process;
* ``ddp``: ``accelerate launch --multi_gpu --num_processes 2`` (every rank a whole replica);
* ``fsdp``: ``accelerate launch --config_file examples/accelerate/fsdp.yaml`` (FSDP2 shards).

Per rank, after the last step, it counts the bytes of the tensors the run holds: the trained
model's parameters (a DTensor's local shard only), its gradients (same shapes as the trained
parameters; reported from them, since the optimizer frees them after each step), Adam's
moments (local shards too) and the full copies FSDP keeps (the ``mirror`` the embedded engine
and the sync read, a reference model). It also reports each rank's peak RSS
(``getrusage``), once after set-up (model loaded, copied, sharded) and once at the end, and the
peak RSS of the training phase alone (`RssSampler`): of the steps (``steps_peak_rss_mb``) and
with the final checkpoint (``training_peak_rss_mb``; under FSDP rank 0 gathers the whole model
and Adam state for it); RSS includes the interpreter, torch, the engine's KV cache, the activations and DDP's gradient
buckets. Every mode runs with ``MALLOC_MMAP_THRESHOLD_=1MiB`` (large blocks returned to the OS
when freed), so RSS tracks the live tensors rather than glibc's retained heap. The LAST stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MB = 1024 * 1024


def _bytes(t: Any) -> int:
    local = t.to_local() if hasattr(t, "to_local") else t
    return int(local.numel() * local.element_size())


def tensor_bytes(policy: Any) -> dict[str, float]:
    """MiB of the policy's tensors on this rank, by role."""
    import torch

    params = sum(_bytes(p) for p in policy.model.parameters())
    trained = sum(_bytes(p) for p in policy.params)
    adam = sum(_bytes(v) for s in policy.optimizer.state.values() for v in s.values()
               if isinstance(v, torch.Tensor) and v.dim() > 0)
    copies = sum(_bytes(p) for p in policy.mirror.parameters()) if policy.mirror is not None else 0
    if policy.ref_model is not None:
        copies += sum(_bytes(p) for p in policy.ref_model.parameters())
    return {"params_mb": params / MB, "grads_mb": trained / MB, "adam_mb": adam / MB,
            "params_grads_adam_mb": (params + trained + adam) / MB, "full_copies_mb": copies / MB}


class RssSampler:
    """The highest resident set size seen during the training phase, sampled every 5 ms.

    Set-up's freed memory is handed back to the OS first (``malloc_trim``), so the figure is
    what training itself needs, not the loading phase's high-water mark the allocator kept.
    """

    def __init__(self) -> None:
        self.peak_mb = 0.0
        self.steps_peak_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        from trainers.grpo.dist.heap import give_back_freed_memory

        give_back_freed_memory()
        self._thread.start()

    def _run(self) -> None:
        import psutil

        proc = psutil.Process()
        while not self._stop.is_set():
            self.peak_mb = max(self.peak_mb, proc.memory_info().rss / MB)
            time.sleep(0.005)

    def mark(self) -> None:
        """End of the steps: their peak is kept as ``steps_peak_mb``; sampling goes on."""
        self.steps_peak_mb = self.peak_mb

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def worker(out: Path, hidden: int, layers: int, steps: int) -> None:
    """One rank: train, then write its figures to ``out/rank<r>.json``."""
    import io

    from rich.console import Console

    from trainers.grpo.config import load_config
    from trainers.grpo.trainer import GRPOTrainer

    tiny = {"hidden_size": hidden, "num_hidden_layers": layers, "intermediate_size": 3 * hidden,
            "num_attention_heads": max(1, hidden // 64), "num_key_value_heads": max(1, hidden // 128)}
    cfg = load_config(ROOT / "examples" / "configs" / "quickstart.toml", {
        "output_dir": str(out / "run"), "max_steps": steps, "save_every": 0, "progress": False, "plot": False,
        "num_sample_completions": 0, "torch_threads": 1, "tiny_model": tiny,
    })
    sampler = RssSampler()

    class Measured(GRPOTrainer):
        def setup(self) -> None:
            super().setup()
            self.setup_rss_mb = peak_rss_mb()
            sampler.start()  # from here: the training phase

        def _finish(self) -> None:
            sampler.mark()  # the steps are done; the final checkpoint (gathered to rank 0 under FSDP) follows
            super()._finish()

    trainer = Measured(cfg, console=Console(file=io.StringIO()))
    trainer.train()
    sampler.stop()
    rank = trainer.dist.rank
    figures = {**tensor_bytes(trainer.policy), "peak_rss_after_setup_mb": trainer.setup_rss_mb,
               "peak_rss_mb": peak_rss_mb(), "steps_peak_rss_mb": sampler.steps_peak_mb,
               "training_peak_rss_mb": sampler.peak_mb,
               "total_params": sum(p.numel() for p in trainer.policy.model.parameters()),
               "sharded": trainer.policy.sharded}
    (out / f"rank{rank}.json").write_text(json.dumps(figures))


def launch(mode: str, out: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Run one mode; every rank's figures."""
    from verifiers.inference.vllm.server import free_port

    script = [str(Path(__file__).resolve()), "--worker", str(out), "--hidden", str(args.hidden),
              "--layers", str(args.layers), "--steps", str(args.steps)]
    port = ["--main_process_ip", "127.0.0.1", "--main_process_port", str(free_port())]
    common = ["--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
    accelerate = [sys.executable, "-m", "accelerate.commands.launch"]
    cmd = {
        "one": [sys.executable, *script],
        "ddp": [*accelerate, "--multi_gpu", *common, *port, *script],
        "fsdp": [*accelerate, "--config_file", str(ROOT / "examples" / "accelerate" / "fsdp.yaml"), *port, *script],
    }[mode]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
           "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1", "GLOO_SOCKET_IFNAME": "lo",
           # blocks of 1 MiB and more mapped on their own and unmapped when freed, in every mode: RSS then
           # follows the live tensors instead of what glibc's heap kept after the last peak
           "MALLOC_MMAP_THRESHOLD_": str(MB)}
    out.mkdir(parents=True)
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{mode} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--modes", default="one,ddp,fsdp")
    ap.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker is not None:
        sys.path.insert(0, str(ROOT))
        worker(args.worker, args.hidden, args.layers, args.steps)
        return
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in [m.strip() for m in args.modes.split(",") if m.strip()]:
            ranks = launch(mode, Path(tmp) / mode, args)
            results[mode] = {"ranks": [{k: round(v, 1) if isinstance(v, float) else v for k, v in r.items()}
                                       for r in ranks],
                             "max_params_grads_adam_mb": round(max(r["params_grads_adam_mb"] for r in ranks), 1),
                             "max_peak_rss_mb": round(max(r["peak_rss_mb"] for r in ranks), 1),
                             "max_steps_peak_rss_mb": round(max(r["steps_peak_rss_mb"] for r in ranks), 1),
                             "max_training_peak_rss_mb": round(max(r["training_peak_rss_mb"] for r in ranks), 1)}
            print(f"{mode}: {results[mode]}", flush=True)
    base = results.get("ddp") or results.get("one")
    if base and "fsdp" in results:
        fsdp = results["fsdp"]
        fsdp["params_grads_adam_vs_ddp"] = round(fsdp["max_params_grads_adam_mb"] / base["max_params_grads_adam_mb"], 3)
        fsdp["peak_rss_vs_ddp"] = round(fsdp["max_peak_rss_mb"] / base["max_peak_rss_mb"], 3)
        fsdp["steps_peak_rss_vs_ddp"] = round(fsdp["max_steps_peak_rss_mb"] / base["max_steps_peak_rss_mb"], 3)
        fsdp["training_peak_rss_vs_ddp"] = round(fsdp["max_training_peak_rss_mb"] / base["max_training_peak_rss_mb"], 3)
    print(json.dumps({"hidden": args.hidden, "layers": args.layers, "modes": results,
                      "load_1min": os.getloadavg()[0], "cpus": os.cpu_count()}))


if __name__ == "__main__":
    main()
