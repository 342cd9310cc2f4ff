"""Live progress of an evaluation: done/total, rollouts/s, running reward mean, errors.

The counters (`EvalProgress`) are separate from the drawing (`EvalDisplay`): the
runner always keeps counters, and draws them with rich only on a terminal. Piped into a
file or CI log, a live display would print escape codes and redraws, so there it prints
one plain line every ``plain_every_s`` seconds instead: a long run in CI must still show
that it moves, and how fast.

Whatever the output, the first message of each error type is printed as soon as it
happens: a wrong model name should be visible after one rollout, not after the run.
"""

from __future__ import annotations

import threading
import time
from types import TracebackType

from rich.console import Console
from rich.markup import escape as rich_escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from verifiers.terminal import escape_controls
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

    def line(self) -> str:
        """One plain progress line: done/total, reward mean, errors, rate, ETA."""
        share = f" ({100 * self.done / self.total:.0f}%)" if self.total else ""
        mean = self.reward_mean
        rate = self.rate
        left = self.total - self.done
        eta = f"{left / rate:.0f} s" if rate > 0 else "?"
        return (
            f"progress: {self.done}/{self.total} rollouts{share}, reward mean "
            f"{'-' if mean is None else f'{mean:.4f}'}, errors {self.errors}, {rate:.2f} rollouts/s, ETA {eta}"
        )


class EvalDisplay:
    """A rich progress bar fed by `update`; a no-op when disabled or not on a terminal."""

    def __init__(
        self,
        total: int,
        console: Console | None = None,
        *,
        enabled: bool = True,
        description: str = "rollouts",
        plain_every_s: float = 10.0,
    ) -> None:
        self.console = console if console is not None else Console(stderr=True)
        self.progress = EvalProgress(total)
        self.enabled = enabled and self.console.is_terminal
        self.plain_every_s = plain_every_s if enabled and not self.console.is_terminal else 0.0
        self.description = description
        self.first_errors: dict[str, str] = {}
        """The first message of each rollout error type seen so far (printed once each)."""
        self._bar: Progress | None = None
        self._task: TaskID | None = None
        self._stop_lines = threading.Event()
        self._lines: threading.Thread | None = None

    def __enter__(self) -> EvalDisplay:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        self.progress.started = time.monotonic()
        if self.plain_every_s > 0 and self._lines is None:
            self._stop_lines.clear()
            self._lines = threading.Thread(target=self._print_lines, name="vf-eval-progress", daemon=True)
            self._lines.start()
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
            rich_escape(escape_controls(self.description)), total=self.progress.total, rate=0.0, reward="-", errors=0
        )
        self._bar.start()

    def update(self, result: RolloutResult) -> None:
        """Count one finished rollout and redraw (rich throttles the actual refresh)."""
        p = self.progress
        p.add(result)
        if result.error is not None and result.error.type not in self.first_errors:
            self.first_errors[result.error.type] = result.error.message
            self.console.print(
                escape_controls(f"first {result.error.type}: {result.error.message[:500]}"),
                style="red",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
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

    def _print_lines(self) -> None:
        """Thread body: a plain progress line every ``plain_every_s`` until `stop`."""
        while not self._stop_lines.wait(self.plain_every_s):
            self.console.print(self.progress.line(), markup=False, highlight=False, soft_wrap=True)

    def stop(self) -> None:
        if self._lines is not None:
            self._stop_lines.set()
            self._lines.join(5)
            self._lines = None
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
