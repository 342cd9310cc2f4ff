"""Per-call overhead of the code sandbox's isolation: namespaces + seccomp vs limits alone.

    python benchmarks/sandbox_overhead.py [--calls 40]

Runs ``print(1)`` through `verifiers.tools.sandbox.run_python` with ``isolation="off"`` (the
sandbox before namespaces: one child process, rlimits, audit hook) and ``"auto"`` (PID, mount,
IPC and network namespaces, a fresh /proc and /dev/shm, no capabilities, seccomp), alternating
the two so machine noise hits both alike. Reports the median seconds per call of each and the
difference. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

from verifiers.tools.sandbox import SandboxLimits, run_python


async def _time(limits: SandboxLimits) -> tuple[float, bool]:
    t0 = time.perf_counter()
    result = await run_python("print(1)", limits)
    assert result.stdout == "1\n", result
    return time.perf_counter() - t0, result.isolated


async def main(calls: int) -> dict[str, object]:
    off, auto = SandboxLimits(isolation="off"), SandboxLimits(isolation="auto")
    await _time(off), await _time(auto)  # warm the page cache
    times: dict[str, list[float]] = {"off": [], "auto": []}
    isolated = True
    for _ in range(calls):
        for name, limits in (("off", off), ("auto", auto)):
            seconds, iso = await _time(limits)
            times[name].append(seconds)
            if name == "auto":
                isolated = isolated and iso
    off_s, auto_s = statistics.median(times["off"]), statistics.median(times["auto"])
    return {"benchmark": "sandbox_overhead", "calls": calls, "isolated": isolated,
            "off_median_s": round(off_s, 4), "isolated_median_s": round(auto_s, 4),
            "overhead_ms": round(1000 * (auto_s - off_s), 1), "ratio": round(auto_s / off_s, 3)}


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=40)
    print(json.dumps(asyncio.run(main(ap.parse_args().calls))))
