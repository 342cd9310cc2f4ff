"""Progress of the benchmarks' long evaluations: a live line on a terminal, a plain line every 30 s off one.

An evaluation of a real model takes minutes (the untrained model's replies run to ``max_tokens``,
and a batch of agent programs may finish none of its rollouts for minutes); a benchmark that
prints nothing for that long looks hung. ``Ticker`` counts finished rollouts (it is the
``on_rollout`` callback of ``Environment.a_evaluate``) and, used as ``async with``, prints
done/total, the rate and the time left every ``every_s`` seconds whether or not any finished.
On a terminal (``live``, default: stdout is one) the same line is redrawn in place every
second instead, and ended with a newline when the evaluation is over, so a log file gets
plain lines and a person watching gets a line that moves.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from typing import Any


class Ticker:
    """``on_rollout`` callback; ``async with`` prints ``label: done/total rollouts, ...`` every ``every_s``."""

    def __init__(self, label: str, total: int, every_s: float = 30.0, echo: Any = print,
                 live: bool | None = None) -> None:
        self.label, self.total, self.every_s, self.echo = label, total, every_s, echo
        self.live = sys.stdout.isatty() if live is None else live
        self.redraw_s = 1.0
        self.done = 0
        self.t0 = time.perf_counter()
        self._task: asyncio.Task[None] | None = None

    def __call__(self, _: Any = None) -> None:
        self.done += 1

    def line(self) -> str:
        elapsed = time.perf_counter() - self.t0
        rate = self.done / max(elapsed, 1e-9)
        left = f"~{(self.total - self.done) / rate:.0f} s left" if self.done else "time left unknown"
        return f"  {self.label}: {self.done}/{self.total} rollouts, {rate:.2f}/s, {left}, {elapsed:.0f} s so far"

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.redraw_s if self.live else self.every_s)
            if self.live:
                self.echo("\r" + self.line(), end="", flush=True)
            else:
                self.echo(self.line(), flush=True)

    async def __aenter__(self) -> Ticker:
        self.t0 = time.perf_counter()
        self._task = asyncio.create_task(self._tick())
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.live:
            self.echo("\r" + self.line(), flush=True)
