"""Does a random tiny model learn to use a tool? MIX (GRPO + SFT on expert episodes), key-lookup, CPU.

Runs exactly `vf-train examples/configs/agentic.toml` (in a temporary output directory) and
reads its metrics.jsonl: the mean reward over the first and the last 10 steps, the model turns
per episode and the share of episodes whose tool call parsed and ran over the last 10 steps,
and the wall time. Targets (issue 13), on 2 CPU cores: reward_first <= 0.2, reward_last >= 0.8,
mean_turns_last >= 2, wall_s <= 600. The last line printed is one JSON object.

    python benchmarks/agentic_learning.py [--plot docs/img/agentic_learning.png] [vf-train overrides]

``--plot PNG`` also draws reward and model turns per episode over training (the figure in
docs/training.md).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "examples" / "configs" / "agentic.toml"
WINDOW = 10
TARGETS = {"reward_first_max": 0.2, "reward_last_min": 0.8, "mean_turns_last_min": 2.0, "wall_s_max": 600.0}


def _mean(rows: list[dict[str, Any]], key: str) -> float:
    values = [float(r[key]) for r in rows if key in r]
    return sum(values) / len(values) if values else float("nan")


def summarize(rows: list[dict[str, Any]], wall_s: float) -> dict[str, Any]:
    """The benchmark's figures from the training rows of a metrics.jsonl (one dict per step)."""
    steps = [r for r in rows if "reward" in r]
    if not steps:
        raise ValueError("no training steps in the metrics: the run logged nothing to summarise")
    first, last = steps[:WINDOW], steps[-WINDOW:]
    out = {
        "reward_first": round(_mean(first, "reward"), 4),
        "reward_last": round(_mean(last, "reward"), 4),
        "wall_s": round(wall_s, 1),
        "steps": len(steps),
        "mean_turns_first": round(_mean(first, "rewards/model_turns"), 3),
        "mean_turns_last": round(_mean(last, "rewards/model_turns"), 3),
        "tool_call_success_last": round(_mean(last, "rewards/tool_call_ran"), 4),
        "correct_answer_last": round(_mean(last, "rewards/correct_answer"), 4),
    }
    out["targets_met"] = bool(
        out["reward_first"] <= TARGETS["reward_first_max"]
        and out["reward_last"] >= TARGETS["reward_last_min"]
        and out["mean_turns_last"] >= TARGETS["mean_turns_last_min"]
        and wall_s <= TARGETS["wall_s_max"]
    )
    return out


def plot(rows: list[dict[str, Any]], png: Path) -> Path:
    """Reward and model turns per episode against the step, side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in rows if "reward" in r]
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.2))
    a.plot(steps, [r["reward"] for r in rows if "reward" in r], lw=1.5, label="reward")
    a.plot(steps, [r.get("rewards/tool_call_ran", 0.0) for r in rows if "reward" in r], lw=1, label="tool call ran")
    a.set(title="key-lookup: mean reward", xlabel="step", ylim=(-0.02, 1.02))
    a.legend(loc="lower right")
    b.plot(steps, [r.get("rewards/model_turns", 0.0) for r in rows if "reward" in r], lw=1.5, color="C2")
    b.set(title="model turns per episode", xlabel="step", ylim=(0, 3.2))
    for ax in (a, b):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=100)
    plt.close(fig)
    return png


def main(argv: list[str]) -> None:
    from trainers.grpo.config import load_config
    from trainers.grpo.trainer import GRPOTrainer

    png = None
    if argv[:1] == ["--plot"]:
        png, argv = Path(argv[1]), argv[2:]
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        overrides = ["--output_dir", str(run), "--progress", "false", "--plot", "false", *argv]
        cfg = load_config(CONFIG, overrides)
        t = time.perf_counter()
        GRPOTrainer(cfg).train()
        wall = time.perf_counter() - t
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    out = summarize(rows, wall)
    out["rollouts_per_step"] = cfg.rows_per_step
    if png is not None:
        plot(rows, png)
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
