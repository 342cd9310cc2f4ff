"""Does a random tiny model learn to use a tool? SFT warm-up on content, then MIX, key-lookup, CPU.

Runs exactly `vf-train examples/configs/agentic.toml` (in a temporary output directory) and
reads its metrics.jsonl: the mean reward over the first and the last 10 RL steps, the model
turns per episode and the share of episodes whose tool call parsed and ran over the last 10
steps, and the wall time of the whole run (the SFT warm-up included). Targets (issue 13), on 2
CPU cores: reward_first <= 0.2, reward_last >= 0.8, mean_turns_last >= 2, wall_s <= 600. The
last line printed is one JSON object.

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
        "right_key_called_last": round(_mean(last, "rewards/right_key_called"), 4),
    }
    out["targets_met"] = bool(
        out["reward_first"] <= TARGETS["reward_first_max"]
        and out["reward_last"] >= TARGETS["reward_last_min"]
        and out["mean_turns_last"] >= TARGETS["mean_turns_last_min"]
        and wall_s <= TARGETS["wall_s_max"]
    )
    return out


def plot(rows: list[dict[str, Any]], png: Path, warmup: list[dict[str, Any]] | None = None) -> Path:
    """The warm-up's loss (when there was one), then reward and model turns per episode against the RL step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in rows if "reward" in r]
    if warmup:
        fig, (w, a, b) = plt.subplots(1, 3, figsize=(13, 3.2))
        w.plot([r["warmup_step"] for r in warmup], [r["loss"] for r in warmup], lw=1, color="C3")
        w.set(title="SFT warm-up: loss on content tokens", xlabel="warm-up step", yscale="log")
        w.grid(alpha=0.3)
    else:
        fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.2))
    a.plot(steps, [r["reward"] for r in rows if "reward" in r], lw=1.5, label="reward")
    a.plot(steps, [r.get("rewards/tool_call_ran", 0.0) for r in rows if "reward" in r], lw=1, label="tool call ran")
    a.set(title="key-lookup: mean reward", xlabel="RL step", ylim=(-0.02, 1.02))
    a.legend(loc="lower right")
    b.plot(steps, [r.get("rewards/model_turns", 0.0) for r in rows if "reward" in r], lw=1.5, color="C2")
    b.set(title="model turns per episode", xlabel="RL step", ylim=(0, 3.2))
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
        run = Path(cfg.output_dir)  # an --output_dir override keeps the run where the user asked
        t = time.perf_counter()
        GRPOTrainer(cfg).train()
        wall = time.perf_counter() - t
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
        log = run / "warmup.jsonl"
        warmup = [json.loads(line) for line in log.read_text().splitlines() if line.strip()] if log.is_file() else []
    out = summarize(rows, wall)
    import torch

    out["torch_threads"] = torch.get_num_threads()  # the wall time depends on it (`torch_threads` follows the load)
    out["rollouts_per_step"] = cfg.rows_per_step
    out["warmup_steps"] = len(warmup)
    if warmup:
        tail = warmup[-WINDOW:]
        out["warmup_loss_last"] = round(sum(r["loss"] for r in tail) / len(tail), 4)
        out["warmup_s"] = round(warmup[-1]["time_s"], 1)
    if png is not None:
        plot(rows, png, warmup)
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
