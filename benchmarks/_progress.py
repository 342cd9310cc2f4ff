"""A plain progress line at most every 30 s for the benchmarks' long evaluations.

An evaluation of a real model takes minutes (the untrained model's replies run to ``max_tokens``);
a benchmark that prints nothing for that long looks hung. ``Ticker`` is an ``on_rollout``
callback for ``Environment.a_evaluate``: done/total, the rate and the time left, one line at a time.
"""

from __future__ import annotations

import time
from typing import Any


class Ticker:
    """``on_rollout`` callback printing ``label: done/total rollouts, rate/s, ~left s`` every ``every_s``."""

    def __init__(self, label: str, total: int, every_s: float = 30.0, echo: Any = print) -> None:
        self.label, self.total, self.every_s, self.echo = label, total, every_s, echo
        self.done = 0
        self.t0 = self.last = time.perf_counter()

    def __call__(self, _: Any = None) -> None:
        self.done += 1
        now = time.perf_counter()
        if now - self.last < self.every_s:
            return
        self.last = now
        rate = self.done / max(now - self.t0, 1e-9)
        left = (self.total - self.done) / rate if rate else float("inf")
        self.echo(f"  {self.label}: {self.done}/{self.total} rollouts, {rate:.2f}/s, ~{left:.0f} s left, "
                  f"{now - self.t0:.0f} s so far", flush=True)
