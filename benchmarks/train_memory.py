"""Where a CPU training run's memory goes: one process, the embedded engine and the learner, by part.

    python benchmarks/train_memory.py                                   # the real-model recipe, 4 steps (~3 min)
    python benchmarks/train_memory.py --steps 6 -- --micro_batch_tokens 1024 --logprob_chunk_tokens 256
    python benchmarks/train_memory.py --config examples/configs/quickstart.toml

On a CPU the trainer, its embedded engine and glibc's heap share one process, so its peak resident
size (``memory/peak_rss_gb`` in the run's metrics) is the figure that decides whether a run fits a
machine. This script trains ``--config`` (default `examples/configs/arithmetic_smollm2.toml`, overrides
after ``--``) for ``--steps`` steps and splits that peak into what it is made of:

* ``libraries_gb``: the interpreter, torch and the trainer's imports (resident before set-up);
* ``weights_gb``: the model's parameters (their bytes); ``setup_gb``: everything set-up added;
* ``first_batch_gb``: what generating the first batch added: the engine's oneDNN-packed copies of the
  projections (``engine_packed_gb``, counted as opaque tensors), its KV cache and decoding workspace;
* ``optimizer_state_gb``: AdamW's moments (their bytes, after the first step);
* ``learner_step_peak_gb``: the most tensor memory one step made at once (gradients, the learner's packed
  weights and their transposes, activations, the logits chunk), counted op by op by
  `trainers.testing.memory.PeakMemory` on the learner's thread (a lower bound: kernels' own scratch
  space is not seen); ``gradients_gb``: the trained parameters' bytes, part of it;
* ``unexplained_gb``: the peak less all of the above: the freed memory glibc keeps for reuse
  (``retain_freed_memory``), fragmentation, and the engine's work on the next batch while the learner
  trains (``num_batches_ahead``).

Figures are GiB (2**30 bytes). The LAST stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "benchmarks") not in sys.path:
    sys.path.insert(0, str(ROOT / "benchmarks"))
GB = 2**30


def resident() -> dict[str, float]:
    from trainers.grpo.dist.heap import resident_memory_gb

    return resident_memory_gb()


def measure(config: Path, steps: int, overrides: list[str], output_dir: Path) -> dict[str, Any]:
    """Train ``steps`` steps of ``config`` in this process and return the parts of its peak."""
    from fsdp_memory import MB, tensor_bytes
    from rich.console import Console

    from trainers.grpo.config import load_config
    from trainers.grpo.trainer import GRPOTrainer
    from trainers.testing.memory import PeakMemory

    libraries = resident()["memory/rss_gb"]
    cfg = load_config(config, ["--max_steps", str(steps), "--output_dir", str(output_dir), "--progress", "false",
                               "--num_sample_completions", "0", "--plot", "false", "--save_every", "0", *overrides])
    figures: dict[str, Any] = {"libraries_gb": libraries, "steps": []}

    class Measured(GRPOTrainer):
        def setup(self) -> None:
            super().setup()
            figures["setup_gb"] = resident()["memory/rss_gb"] - libraries

        def _take_batch(self) -> Any:
            before = resident()["memory/rss_gb"]
            out = super()._take_batch()
            if "first_batch_gb" not in figures:
                figures["first_batch_gb"] = resident()["memory/rss_gb"] - before
                figures["engine_packed_gb"] = packed_engine_bytes() / GB
            return out

        def _train_on(self, batch: Any) -> dict[str, float]:
            with PeakMemory() as mem:
                out = super()._train_on(batch)
            if not figures["steps"]:  # AdamW's moments exist from the first step on
                figures["parts"] = {k: v * MB / GB for k, v in tensor_bytes(self.policy).items()}
            figures["steps"].append({"tensor_peak_gb": round(mem.peak_bytes / GB, 3), **resident()})
            print(f"step {len(figures['steps'])}: {json.dumps(figures['steps'][-1])}", flush=True)
            return out

    with contextlib.chdir(ROOT):  # a recipe's environment may be a checkout under environments/
        Measured(cfg, console=Console(file=io.StringIO())).train()
    parts = figures.pop("parts")
    figures |= {"weights_gb": parts["params_mb"], "optimizer_state_gb": parts["adam_mb"],
                "gradients_gb": parts["grads_mb"], "peak_rss_gb": resident()["memory/peak_rss_gb"]}
    # The first step's tensor peak includes AdamW's moments, which it creates; the others' do not.
    peaks = [s["tensor_peak_gb"] for s in figures["steps"]]
    figures["learner_step_peak_gb"] = max(peaks[1:]) if len(peaks) > 1 else peaks[0] - figures["optimizer_state_gb"]
    explained = (figures["libraries_gb"] + figures["setup_gb"] + figures["first_batch_gb"]
                 + figures["optimizer_state_gb"] + figures["learner_step_peak_gb"])
    figures["unexplained_gb"] = figures["peak_rss_gb"] - explained
    return {k: round(v, 6) if isinstance(v, float) else v for k, v in figures.items()}


def packed_engine_bytes() -> int:
    """Bytes of the oneDNN-packed (opaque) tensors alive now: the engine's packed projections."""
    import gc

    import torch

    total = 0
    for obj in gc.get_objects():
        if isinstance(obj, torch.Tensor) and obj.is_mkldnn:
            total += obj.numel() * obj.element_size()
    return total


def main(argv: list[str] | None = None) -> None:
    import tempfile

    argv = list(sys.argv[1:] if argv is None else argv)
    overrides: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, overrides = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", type=Path, default=ROOT / "examples" / "configs" / "arithmetic_smollm2.toml")
    ap.add_argument("--steps", type=int, default=4, help="training steps (the peak grows over the first few)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        result = measure(args.config, args.steps, overrides, Path(tmp) / "run")
    result |= {"config": str(args.config), "overrides": overrides}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
