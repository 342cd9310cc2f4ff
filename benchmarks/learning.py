"""Does the Quickstart training learn? GRPO on a random tiny model, letter-repeat, CPU.

Runs exactly `vf-train examples/configs/quickstart.toml` (in a temporary output directory)
and prints the mean reward of the first and last 10% of steps and the wall time.
Target (issue 5): from <= 0.2 to >= 0.8 within 10 minutes on 2 cores.
The last line printed is one JSON object.

    python benchmarks/learning.py [--max_steps N] [other vf-train overrides]
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from trainers.grpo.config import load_config
from trainers.grpo.trainer import GRPOTrainer

CONFIG = Path(__file__).resolve().parent.parent / "examples" / "configs" / "quickstart.toml"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        overrides = ["--output_dir", str(Path(tmp) / "run"), "--progress", "false", *sys.argv[1:]]
        cfg = load_config(CONFIG, overrides)
        t = time.perf_counter()
        summary = GRPOTrainer(cfg).train()
        wall = time.perf_counter() - t
    out = {
        "reward_first": round(summary.reward_first, 4),
        "reward_last": round(summary.reward_last, 4),
        "wall_s": round(wall, 1),
        "steps": summary.steps,
        "rollouts_per_step": cfg.rows_per_step,
        "targets_met": summary.reward_first <= 0.2 and summary.reward_last >= 0.8 and wall <= 600,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
