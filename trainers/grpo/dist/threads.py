"""How many torch threads to use when the config does not say: the cores actually free.

torch defaults to one thread per core. On a machine where other processes already keep the
cores busy (a second run, a test suite, an inference server) those threads spin against each
other: the agentic recipe's SFT warm-up measured 1.2 s/step with the default and about 4x
faster with one thread on a busy 2-core machine. So the default is the cores this process may
use, minus the load the other processes put on them, shared among this machine's training
processes. ``OMP_NUM_THREADS`` set by the user wins (it is their explicit choice).
"""

from __future__ import annotations

import math
import os


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def default_torch_threads(local_processes: int = 1, load: float | None = None) -> int:
    """Threads for one of ``local_processes`` training processes, given the 1-minute ``load``."""
    cores = usable_cores()
    if load is None:
        try:
            load = os.getloadavg()[0]
        except OSError:
            load = 0.0
    free = max(1.0, cores - load)
    return max(1, min(cores, math.floor(free / max(local_processes, 1) + 0.5)))


def choose_torch_threads(configured: int | None, local_processes: int = 1) -> tuple[int | None, str]:
    """``(threads to set or None to leave torch's own, why)`` for the start-up banner."""
    if configured:
        return configured, "torch_threads"
    if os.environ.get("OMP_NUM_THREADS"):
        return None, "OMP_NUM_THREADS"
    return default_torch_threads(local_processes), f"free cores of {usable_cores()}"
