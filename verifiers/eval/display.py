"""Live progress of an evaluation: done/total, rollouts/s, running reward mean, errors.

The counters (`EvalProgress`) are separate from the drawing (`EvalDisplay`): the
runner always keeps counters, and draws them with rich only on a terminal. Piped into a
file or CI log, a live display would print escape codes and redraws, so it stays quiet.
"""

from __future__ import annotations

import time
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from verifiers.types import RolloutResult


class EvalProgress:
    """Running counters over the rollouts finished in this session."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0
        self.errors = 0
        self.reward_sum = 0.0
        self.started = time.monotonic()

    def add(self, result: RolloutResult) -> None:
        self.done += 1
        self.reward_sum += result.reward
        if result.error is not None:
            self.errors += 1

    @property
    def reward_mean(self) -> float | None:
        return self.reward_sum / self.done if self.done else None

    @property
    def rate(self) -> float:
        """Rollouts per second since the start."""
        elapsed = time.monotonic() - self.started
        return self.done / elapsed if elapsed > 0 else 0.0


class EvalDisplay:
    """A rich progress bar fed by `update`; a no-op when disabled or not on a terminal."""

    def __init__(
        self,
        total: int,
        console: Console | None = None,
        *,
        enabled: bool = True,
        description: str = "rollouts",
    ) -> None:
        self.console = console if console is not None else Console(stderr=True)
        self.progress = EvalProgress(total)
        self.enabled = enabled and self.console.is_terminal
        self.description = description
        self._bar: Progress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> EvalDisplay:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        self.progress.started = time.monotonic()
        if not self.enabled or self._bar is not None:
            return
        self._bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]:.1f} rollouts/s"),
            TextColumn("reward {task.fields[reward]}"),
            TextColumn("errors {task.fields[errors]}"),
            TimeElapsedColumn(),
            console=self.console,
            transient=False,
        )
        self._task = self._bar.add_task(
            self.description, total=self.progress.total, rate=0.0, reward="-", errors=0
        )
        self._bar.start()

    def update(self, result: RolloutResult) -> None:
        """Count one finished rollout and redraw (rich throttles the actual refresh)."""
        p = self.progress
        p.add(result)
        if self._bar is None or self._task is None:
            return
        mean = p.reward_mean
        self._bar.update(
            self._task,
            completed=p.done,
            rate=p.rate,
            reward="-" if mean is None else f"{mean:.3f}",
            errors=p.errors,
        )

    def stop(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
