"""Seconds per step of the Quickstart: in process vs Ray (2 rollout workers) vs 2 training processes.

Each mode is the real command a user runs, in a subprocess with its own output directory:

* ``inprocess``: ``vf-train examples/configs/quickstart.toml``
* ``ray``: ``vf-train examples/configs/quickstart_ray.toml`` (a local 127.0.0.1 cluster, 2 workers)
* ``two_processes``: ``vf-train examples/configs/quickstart.toml --num_processes 2`` (gloo on a CPU)
* ``ray_two_processes`` (not run by default): ``quickstart_ray.toml --num_processes 2``: rank 0 starts
  the cluster, the workers and the store, both ranks train their share of each step
* ``fsdp_two_processes`` (not run by default): ``vf-train examples/configs/quickstart.toml
  --num_processes 2 --fsdp``: the same 2 processes with the model sharded (FSDP2, `fully_shard`)
* ``vllm``, ``two_processes_vllm``, ``ray_vllm`` (not run by default; vLLM's CPU build): the same
  three topologies on ``quickstart_vllm.toml`` (one managed vLLM server; the two-process run's
  server started by rank 0; the Ray workers calling it directly), their ratios against ``vllm``

s/step is the median of ``time/step_s`` over the steps after the first ``--warmup``; start-up
(imports, Ray, worker processes, the process group) is reported apart as ``startup_s``. Ratios
are against the in-process run of the same invocation. ``--learn`` runs the full 200 steps of
each mode and adds the mean reward of the first and last 10% of steps (target: <= 0.2 -> >= 0.8).
The last line printed is one JSON object.

    python benchmarks/scale.py [--steps 30] [--warmup 5] [--learn] [--modes inprocess,ray,two_processes]
    python benchmarks/scale.py --modes vllm,two_processes_vllm,ray_vllm [--learn]
    python benchmarks/scale.py --modes inprocess,ray,ray_two_processes
    python benchmarks/scale.py --modes inprocess,two_processes,fsdp_two_processes [--learn]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
VLLM = "examples/configs/quickstart_vllm.toml"
MODES: dict[str, list[str]] = {
    "inprocess": ["examples/configs/quickstart.toml"],
    "ray": ["examples/configs/quickstart_ray.toml"],
    "two_processes": ["examples/configs/quickstart.toml", "--num_processes", "2"],
    "ray_two_processes": ["examples/configs/quickstart_ray.toml", "--num_processes", "2"],
    "fsdp_two_processes": ["examples/configs/quickstart.toml", "--num_processes", "2", "--fsdp"],
    # against vLLM (its CPU build; `--modes vllm,two_processes_vllm,ray_vllm`): one managed server each
    "vllm": [VLLM],
    "two_processes_vllm": [VLLM, "--num_processes", "2"],
    "ray_vllm": [VLLM, "--ray.num_workers", "2", "--ray.worker_num_cpus", "0.5"],
}
DEFAULT_MODES = ("inprocess", "ray", "two_processes")
BASELINE = {"vllm": "vllm", "two_processes_vllm": "vllm", "ray_vllm": "vllm"}
"""The mode each ratio is taken against (the same inference backend in one process); others: ``inprocess``."""


def run_mode(name: str, steps: int | None, warmup: int, out: Path) -> dict[str, Any]:
    overrides = ["--output_dir", str(out), "--progress", "false", "--plot", "false", "--save_every", "0",
                 "--num_sample_completions", "0", "--torch_threads", "1"]
    if steps is not None:
        overrides += ["--max_steps", str(steps)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
           "TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1"}
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "trainers.grpo.cli", *MODES[name], *overrides], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    times = [r["time/step_s"] for r in rows[warmup:] if "time/step_s" in r]
    rewards = [r["reward"] for r in rows if "reward" in r]
    k = max(1, len(rewards) // 10)
    return {
        "s_per_step": round(statistics.median(times), 4),
        "generation_s": round(statistics.median(r["time/generation_s"] for r in rows[warmup:]
                                                if "time/generation_s" in r), 4),
        "startup_s": round(wall - sum(r.get("time/step_s", 0.0) for r in rows), 1),
        "steps": len(rows),
        "reward_first": round(sum(rewards[:k]) / k, 4),
        "reward_last": round(sum(rewards[-k:]) / k, 4),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--learn", action="store_true", help="the configs' full 200 steps; report the reward rise")
    ap.add_argument("--modes", default=",".join(DEFAULT_MODES),
                    help=f"comma-separated, from {', '.join(MODES)} (default: {', '.join(DEFAULT_MODES)})")
    args = ap.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise SystemExit(f"unknown mode(s) {unknown}; choose from {list(MODES)}")
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for m in modes:
            results[m] = run_mode(m, None if args.learn else args.steps, args.warmup, Path(tmp) / m)
            print(f"{m}: {results[m]}", flush=True)
    for name, r in results.items():
        against = BASELINE.get(name, "inprocess")
        base = results.get(against, {}).get("s_per_step")
        if base:
            r[f"ratio_vs_{against}"] = round(r["s_per_step"] / base, 2)
    if args.learn:
        for r in results.values():
            r["learned"] = r["reward_first"] <= 0.2 and r["reward_last"] >= 0.8
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    print(json.dumps({"modes": results, "load_1min": load, "cpus": os.cpu_count()}))


if __name__ == "__main__":
    main()
