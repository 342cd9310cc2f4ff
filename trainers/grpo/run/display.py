"""What the run shows on the console: the start-up banner, the progress bar, lines, samples.

Only rank 0 prints (`RunDisplay.print`); lines are not wrapped, because a log file has no width.
The `RunWatch` (trainers.grpo.run.watch) decides which warnings and plain lines a step gets.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trainers.grpo.algo.algorithms import AlgorithmPreset
from trainers.grpo.dist.ranks import Dist
from trainers.grpo.learn.logprobs import learner_forward
from trainers.grpo.learn.policy import Policy
from trainers.grpo.run.reporting import plot_curves, samples_table
from trainers.grpo.run.watch import RunWatch, format_loss
from verifiers.types import RolloutResult


class RunDisplay:
    """Banner, progress bar and step lines of one run (`start` before the loop, `running` around it)."""

    def __init__(self, cfg: Any, console: Any, dist: Dist, preset: AlgorithmPreset) -> None:
        self.cfg = cfg
        self.console = console
        self.dist = dist
        self.preset = preset
        self.progress: Any = None
        self.task: Any = None
        self.watch: RunWatch | None = None
        self.threads = ""
        """Torch threads and why (set by the trainer; shown on a CPU)."""
        self.malloc = ""
        """What `retain_freed_memory` did (set by the trainer; shown on a CPU)."""

    def print(self, text: str) -> None:
        """Rank 0 prints; lines are not wrapped (a log file has no width)."""
        if self.dist.is_main:
            self.console.print(text, soft_wrap=True)

    def start(self, step: int, facts: dict[str, Any], device: Any) -> RunWatch:
        """The progress bar (not drawn yet), the run watch and the banner; returns the watch."""
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        cfg = self.cfg
        self.progress = Progress(TextColumn(f"[bold]{cfg.algorithm}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("{task.fields[info]}"), console=self.console,
                                 disable=not cfg.progress or not self.dist.is_main)
        self.watch = RunWatch(
            self.print, plain=not (cfg.progress and self.console.is_terminal), max_steps=cfg.max_steps,
            start_step=step, every_steps=cfg.log_lines_every, every_s=cfg.log_lines_every_s,
            degenerate_steps=cfg.degenerate_warn_steps or 10**9,
            masks_truncated=self.preset.mask_truncated_completions, filters_groups=self.preset.filter_zero_std_groups,
            collapse_steps=cfg.collapse_warn_steps,
        )
        self.watch.banner(facts)
        from verifiers.inference.engine.devices import unused_gpu_note

        note = unused_gpu_note(str(device), "vf-train trains on the GPU whenever torch can use one")
        if note:
            self.print(note)
        return self.watch

    @contextlib.contextmanager
    def running(self, step: int) -> Iterator[None]:
        """The progress bar is drawn (off a terminal: the heartbeat lines run) while the loop runs."""
        assert self.watch is not None, "start() comes first"
        with self.progress, self.watch.heartbeat():
            self.task = self.progress.add_task("train", total=self.cfg.max_steps, completed=step, info="")
            yield

    def skipped(self, step: int, reward: float, max_refills: int) -> None:
        """A step without an update: every group had equal rewards, even after refills."""
        self.print(f"step {step}: every group had equal rewards after "
                   f"{max_refills} refills (mean {reward:.3f}); no update")
        self.advance(step, f"reward {reward:.3f} (skipped)")

    def record(self, step: int, metrics: dict[str, float], logger: Any) -> None:
        """A finished step: the watch's lines and warnings, the metrics row, the progress bar."""
        assert self.watch is not None, "start() comes first"
        self.watch.step(step, metrics)
        # A step with an evaluation is always logged: its eval/* values are not in any other row.
        if step % self.cfg.log_every == 0 or step == self.cfg.max_steps or "eval/reward" in metrics:
            logger.log(step, metrics)
        self.advance(step, f"reward {metrics['reward']:.3f} loss {format_loss(metrics.get('loss', 0.0))}")

    def advance(self, step: int, info: str) -> None:
        self.progress.update(self.task, completed=step, info=info)

    def facts(self, policy: Policy, num_prompts: int, step: int, out: Path) -> dict[str, Any]:
        """One line at start-up: what is training, where, on what (visible in any log)."""
        model = policy.unwrapped()
        total = sum(p.numel() for p in model.parameters())
        trainable = sum(p.numel() for p in policy.params)
        dtype = next(model.parameters()).dtype
        precision = str(dtype).removeprefix("torch.")
        if self.cfg.mixed_precision != "no":
            precision += f" + {self.cfg.mixed_precision} autocast"
        return {
            "device": str(policy.device) + (f" x{self.dist.world_size} processes" if self.dist.world_size > 1 else ""),
            **({"torch threads": self.threads} if self.threads and policy.device.type == "cpu" else {}),
            **({"allocator": self.malloc} if self.malloc and policy.device.type == "cpu" else {}),
            "dtype": precision,
            # CPU autocast keeps transformers' forward (oneDNN's packed products are float32 only)
            "learner forward": learner_forward(policy.model, autocast=self.cfg.mixed_precision != "no"
                                               and policy.device.type == "cpu"),
            "parameters": f"{total:,}" + (f" ({trainable:,} trained)" if trainable != total else ""),
            **({"sharding": sharding(policy)} if policy.sharded else {}),
            "environment": f"{self.cfg.env_id} ({num_prompts} training prompts)",
            "algorithm": self.cfg.algorithm,
            "steps": f"{step}->{self.cfg.max_steps}",
            "output": str(out),
        }

    def finish(self, groups: list[list[RolloutResult]], step: int, out: Path) -> None:
        """A finished run (rank 0): the last step's samples and the reward curves."""
        if self.dist.is_main and groups and self.cfg.num_sample_completions:
            self.samples(groups, step)
        if self.cfg.plot and self.dist.is_main:
            png = plot_curves(out / "metrics.jsonl", out / "curves.png")
            if png is not None:
                self.console.print(f"curves: {png}")

    def samples(self, groups: list[list[RolloutResult]], step: int) -> None:
        """The first rollout of the first ``num_sample_completions`` groups, as a table."""
        rows = []
        for rs in groups[: self.cfg.num_sample_completions]:
            r = rs[0]
            prompt = r.prompt if isinstance(r.prompt, str) else str((r.prompt[-1] or {}).get("content", ""))
            comp = r.completion if isinstance(r.completion, str) else "".join(
                str(m.get("content") or "") for m in r.completion
            )
            rows.append((prompt, comp, r.reward))
        self.console.print(samples_table(rows, f"samples at step {step}"))


def sharding(policy: Policy) -> str:
    """FSDP: how much of the model each rank holds (its shards of the DTensor parameters)."""
    params = list(policy.model.parameters())
    total = sum(p.numel() for p in params)
    local = sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel() for p in params)
    return f"FSDP2 (fully_shard), {local:,} of {total:,} parameters on this rank"
