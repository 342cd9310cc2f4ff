"""What leaving zero-advantage rows out of the learner's pass saves, on a real run (CPU).

Runs one `vf-train` config twice in the same process, once with ``skip_zero_advantage``
off (the baseline: every rollout row is trained) and once on, and reads both runs'
metrics.jsonl. Groups whose rollouts all score alike have advantage 0, and with beta 0 and
no entropy bonus their rows add nothing to the gradient; early in a run that is most rows.
The update is the same (`tests/trainers/test_zero_advantage_skip.py` checks the gradient), so
the two runs' rewards should track each other; only the learner's time should drop.

    python benchmarks/zero_advantage_skip.py [CONFIG] [vf-train overrides, e.g. --max_steps 60]

CONFIG defaults to examples/configs/quickstart.toml. The last line printed is one JSON
object: each run's learner seconds (``time/train_s`` summed), wall seconds, share of rows
left out, and mean reward over the last 10 steps, and the learner speed-up.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
WINDOW = 10


def run(config: Path, overrides: list[str], skip: bool) -> dict[str, Any]:
    from rich.console import Console

    from trainers.grpo.config import load_config
    from trainers.grpo.trainer import GRPOTrainer

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        cfg = load_config(config, ["--output_dir", str(out), "--progress", "false", "--plot", "false",
                                   "--save_every", "0", *overrides, "--skip_zero_advantage", str(skip).lower()])
        t = time.perf_counter()
        GRPOTrainer(cfg, console=Console(quiet=True)).train()
        wall = time.perf_counter() - t
        rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [r for r in rows if "reward" in r]
    last = steps[-WINDOW:]
    return {
        "train_s": round(sum(r["time/train_s"] for r in steps), 2),
        "wall_s": round(wall, 1),
        "rows_skipped_share": round(sum(r["rows_skipped"] for r in steps) / (len(steps) * cfg.rows_per_step), 3),
        "reward_last": round(sum(r["reward"] for r in last) / len(last), 4),
        "steps": len(steps),
    }


def main(argv: list[str]) -> dict[str, Any]:
    config = ROOT / "examples" / "configs" / "quickstart.toml"
    if argv and not argv[0].startswith("--"):
        config, argv = Path(argv[0]), argv[1:]
    baseline = run(config, argv, skip=False)
    skipping = run(config, argv, skip=True)
    result = {
        "config": str(config.relative_to(ROOT) if config.is_relative_to(ROOT) else config),
        "baseline": baseline,
        "skip": skipping,
        "train_speedup": round(baseline["train_s"] / max(skipping["train_s"], 1e-9), 2),
        "wall_speedup": round(baseline["wall_s"] / max(skipping["wall_s"], 1e-9), 2),
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
