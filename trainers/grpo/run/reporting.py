"""Where training metrics go: ``metrics.jsonl`` always, TensorBoard / wandb when asked, a
rich table of sample completions, and a PNG of the reward, KL and length curves at the end.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verifiers.errors import ConfigError


@dataclass
class TrainSummary:
    """What `GRPOTrainer.train` returns (and ``vf-train`` prints as JSON)."""

    steps: int
    wall_s: float
    reward_first: float
    reward_last: float
    output_dir: str
    interrupted: bool = False


def summarize(out: Path, steps: int, wall_s: float, reward_history: Sequence[float], *, interrupted: bool,
              is_main: bool) -> TrainSummary:
    """The run's first and last tenth of rewards, from ``metrics.jsonl`` (rank 0 writes it)."""
    logged = read_metrics(out / "metrics.jsonl") if is_main else []
    hist = [r["reward"] for r in logged if "reward" in r] or list(reward_history)
    k = max(1, math.ceil(len(hist) * 0.1))
    return TrainSummary(
        steps=steps, wall_s=wall_s,
        reward_first=sum(hist[:k]) / k if hist else float("nan"),
        reward_last=sum(hist[-k:]) / k if hist else float("nan"),
        output_dir=str(out), interrupted=interrupted,
    )


class MetricsLogger:
    """Writes each logged step to every configured sink.

    ``enabled=False`` (the processes other than rank 0 of a multi-process run) logs nothing
    and opens no file: their metrics are the same global values, and several writers of one
    ``metrics.jsonl`` or wandb run would interleave or duplicate rows.
    """

    def __init__(self, out_dir: Path, report_to: Sequence[str], *, run_name: str, config: dict[str, Any],
                 resume_step: int | None = None, enabled: bool = True) -> None:
        self.out_dir = out_dir
        self.path = out_dir / "metrics.jsonl"
        self.enabled = enabled
        self._file: Any = None
        self._tb: Any = None
        self._wandb: Any = None
        if not enabled:
            return
        if resume_step is not None and self.path.exists():
            # Keep what was logged up to the checkpoint; steps after it are about to be redone.
            kept = [ln for ln in self.path.read_text().splitlines() if _step_of(ln) <= resume_step]
            self.path.write_text("".join(k + "\n" for k in kept))
        elif self.path.exists():
            self.path.unlink()
        self._file = self.path.open("a")
        if "tensorboard" in report_to:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as exc:
                raise ConfigError(f"report_to includes 'tensorboard' but it is not installed: pip install tensorboard ({exc})") from None
            self._tb = SummaryWriter(log_dir=str(out_dir / "tensorboard"))
        if "wandb" in report_to:
            try:
                import wandb
            except ImportError:
                raise ConfigError("report_to includes 'wandb' but it is not installed: pip install wandb") from None
            self._wandb = wandb.init(project="verifiers", name=run_name, config=config, dir=str(out_dir))

    def log(self, step: int, metrics: dict[str, float]) -> None:
        if not self.enabled:
            return
        row = {"step": step, **{k: _clean(v) for k, v in metrics.items()}}
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()
        if self._tb is not None:
            for k, v in metrics.items():
                if isinstance(v, (int, float)) and math.isfinite(v):
                    self._tb.add_scalar(k, v, step)
        if self._wandb is not None:
            self._wandb.log(metrics, step=step)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()


def _step_of(line: str) -> int:
    try:
        return int(json.loads(line).get("step", 0))
    except (json.JSONDecodeError, AttributeError):
        return 1 << 62


def _clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def read_metrics(path: Path) -> list[dict[str, Any]]:
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def samples_table(rows: Sequence[tuple[str, str, float]], title: str) -> Any:
    from rich.table import Table

    from verifiers.terminal import plain_text

    table = Table(title=title, show_lines=True)
    table.add_column("prompt", overflow="fold", max_width=40)
    table.add_column("completion", overflow="fold", max_width=60)
    table.add_column("reward", justify="right")
    for prompt, completion, reward in rows:  # model text: controls escaped, never parsed as markup
        table.add_row(plain_text(prompt), plain_text(completion), f"{reward:.3f}")
    return table


def _series(rows: Sequence[dict[str, Any]], key: str) -> list[tuple[float, float]]:
    return [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))]


def curve_panels(rows: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    """``(metric, title)`` of each panel of `plot_curves`, only those with data.

    KL is logged only with a reference model (beta > 0); the gradient norm takes its place
    otherwise (GRPO's loss is near zero by construction: drawn, it is noise around 1e-8).
    """
    second = ("kl", "KL to reference") if _series(rows, "kl") else ("grad_norm", "gradient norm")
    wanted = [("reward", "mean reward"), second,
              ("completions/mean_length", "completion length")]
    return [(k, t) for k, t in wanted if _series(rows, k)]


def plot_curves(metrics_path: Path, out_png: Path) -> Path | None:
    """Reward (train and eval), KL (or the gradient norm without a reference) and completion length as one PNG.

    None when matplotlib is missing or nothing was logged; a panel without data is left out.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    rows = read_metrics(metrics_path)
    if not rows:
        return None
    panels = curve_panels(rows)
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.2), squeeze=False)
    for ax, (key, title) in zip(axes[0], panels, strict=True):
        pts = _series(rows, key)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], lw=1.5, label="train")
        if key == "reward" and _series(rows, "eval/reward"):
            ev = _series(rows, "eval/reward")
            ax.plot([p[0] for p in ev], [p[1] for p in ev], "o-", lw=1.5, label="eval")
            ax.legend(loc="lower right", fontsize=8)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out_png, dpi=100)
    plt.close(fig)
    return out_png
