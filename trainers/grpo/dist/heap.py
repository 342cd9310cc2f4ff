"""The process's heap during training: freed tensor memory kept for reuse.

`retain_freed_memory` (glibc). Why: glibc's ``malloc`` serves blocks above its mmap threshold
(128 KiB at start, adapting upwards) with a fresh ``mmap`` and gives them back with ``munmap``
when freed, and it trims the heap's top back to the kernel. A learner step allocates and frees the
same activation sizes every step, so each new activation page-faults on every 4 KiB page it
touches (about 1.5 µs a page on our 2-core machine): 1,000 to 4,000 faults a step on the trainer
benchmark's 0.8M-parameter model. With both thresholds raised, freed blocks stay in the heap and
are reused; the learner's step measured 81-82 against 83-85 ms (`benchmarks/trainer_step.py`,
alternating runs). The cost: the resident size stays near its peak instead of shrinking after it,
which a training loop returns to every step anyway. ``MALLOC_MMAP_THRESHOLD_`` /
``MALLOC_TRIM_THRESHOLD_`` set by the user win (glibc read them at start-up), and
``retain_freed_memory = false`` turns this off.

Start-up objects are kept from the cyclic collector by `verifiers.gc_freeze`, which
`vf-serve` shares.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from typing import Any

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 1 << 30
"""Blocks below 1 GiB come from the heap (glibc refuses more than its own limit; then 32 MiB)."""
TRIM_THRESHOLD = (1 << 31) - 1
"""Free memory at the heap's top is given back only beyond 2 GiB (``mallopt`` takes a C ``int``)."""
_FALLBACK_MMAP_THRESHOLD = 32 << 20


def _libc_function(name: str) -> Any:
    """glibc's ``name`` (``mallopt``, ``malloc_trim``), or None where the C library has none."""
    lib = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(lib), name, None) if lib else None
    except OSError:
        return None


def retain_freed_memory() -> str:
    """Raise glibc's mmap and trim thresholds for this process; returns what was done, for the banner."""
    if any(os.environ.get(k) for k in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")):
        return "as MALLOC_*_THRESHOLD_ in the environment say"
    mallopt = _libc_function("mallopt")
    if mallopt is None:  # not glibc (macOS, musl without mallopt): the allocator is left as it is
        return "unchanged (not glibc)"
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    if not mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) and not mallopt(_M_MMAP_THRESHOLD, _FALLBACK_MMAP_THRESHOLD):
        return "unchanged (glibc refused mallopt)"
    mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    return "keeps freed memory for reuse"


def resident_memory_gb() -> dict[str, float]:
    """This process's resident memory now and its peak so far, in GB (2**30 bytes), for the step's metrics.

    Why logged: on a CPU the learner, the embedded engine and the allocator's kept pages share one
    process, and its peak is what decides whether a run fits a machine (``memory/peak_rss_gb``). Read
    from ``/proc/self/status``; where there is none (not Linux) the peak comes from ``getrusage``
    and the current figure is left out.
    """
    found: dict[str, float] = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    found[key] = int(value.split()[0]) / 2**20  # kB
    except OSError:
        pass
    if "VmHWM" not in found:
        try:
            import resource
        except ImportError:  # Windows: nothing to read cheaply
            return {}
        scale = 2**30 if sys.platform == "darwin" else 2**20  # bytes on macOS, kB on Linux
        found["VmHWM"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / scale
    out = {"memory/peak_rss_gb": round(found["VmHWM"], 3)}
    if "VmRSS" in found:
        out["memory/rss_gb"] = round(found["VmRSS"], 3)
    return out


def give_back_freed_memory() -> None:
    """Collect garbage, then hand the heap's free memory back to the kernel (``malloc_trim``).

    For a process that ran a trainer and goes on to something else (a benchmark's next side or
    phase): with `retain_freed_memory` what the trainer freed stays resident otherwise.
    """
    import gc

    gc.collect()
    trim = _libc_function("malloc_trim")
    if trim is not None:  # not glibc: nothing to trim
        trim(0)
