"""Totals for a sandboxed run's whole process tree: one cgroup per run (v2, or v1 as root).

RLIMIT_AS and RLIMIT_NPROC are per process (or per user); forked children together exceed them.
A fresh cgroup per run caps memory (``memory.max``, no swap) and the process count
(``pids.max``) for everything the run starts, and is removed, with any leftover process,
when the run ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
import sys
import uuid
from pathlib import Path

__all__ = ["CGROUP_ENV", "Cgroup", "make_cgroup"]

CGROUP_ENV = "VF_SANDBOX_CGROUP"
"""Environment variable: unset or ``auto`` finds a cgroup, ``off`` runs without one, a path names the
cgroup v2 directory (delegated to this user, memory and pids in its ``cgroup.subtree_control``)
under which each run gets its own."""


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _cgroup_mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, fstype, super options) of every cgroup / cgroup2 mount."""
    out = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            left, _, right = line.partition(" - ")
            fields, rfields = left.split(), right.split()
            if len(fields) > 4 and len(rfields) > 2 and rfields[0] in ("cgroup", "cgroup2"):
                out.append((_unescape(fields[4]), rfields[0], set(rfields[2].split(","))))
    return out


class Cgroup:
    """One run's cgroup: v2 (one directory) or v1 (a memory and a pids directory)."""

    def __init__(self, dirs: list[Path], version: int) -> None:
        self.dirs, self.version = dirs, version

    @property
    def procs(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs]

    def _count(self, name: str, key: str) -> int:
        for d in self.dirs:
            with contextlib.suppress(OSError, ValueError):
                for line in (d / name).read_text().splitlines():
                    k, _, v = line.partition(" ")
                    if k == key:
                        return int(v)
        return 0

    def oom_killed(self) -> bool:
        return self._count("memory.events" if self.version == 2 else "memory.oom_control", "oom_kill") > 0

    def pids_exceeded(self) -> bool:
        return self._count("pids.events", "max") > 0

    async def remove(self) -> None:
        """Kill what is left in it (the namespace normally took care of that) and remove it."""
        for d in self.dirs:
            if self.version == 2:
                with contextlib.suppress(OSError):
                    (d / "cgroup.kill").write_text("1")
        for _ in range(200):
            for d in list(self.dirs):
                if self.version == 1:  # these pids are the run's: nothing else joins its cgroup
                    with contextlib.suppress(OSError, ValueError):
                        for pid in (d / "cgroup.procs").read_text().split():
                            with contextlib.suppress(OSError):
                                os.kill(int(pid), signal.SIGKILL)
                with contextlib.suppress(FileNotFoundError):
                    try:
                        d.rmdir()
                    except OSError:
                        continue
                self.dirs.remove(d)
            if not self.dirs:
                return
            await asyncio.sleep(0.01)
        logging.getLogger(__name__).warning("could not remove the sandbox cgroup(s) %s", self.dirs)


def _write(path: Path, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def make_cgroup(memory_mb: int | None, max_processes: int | None, reserved: int = 2) -> tuple[Cgroup | None, str]:
    """A fresh cgroup with the run's totals, or None and why not.

    ``None`` leaves that total unlimited. ``reserved``: processes of the run's own machinery that
    ``max_processes`` does not count (the sandbox's waiting process and init).
    """
    setting = os.environ.get(CGROUP_ENV, "auto").strip() or "auto"
    if setting == "off":
        return None, f"{CGROUP_ENV}=off"
    if sys.platform != "linux":
        return None, "not Linux"
    name = f"vf-sandbox-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    memory = None if memory_mb is None else memory_mb * 1024 * 1024
    pids = "max" if max_processes is None else str(max_processes + reserved)
    mounts = _cgroup_mounts()
    try:
        own = dict(
            (ctrl, path) for _, ctrls, path in (line.split(":", 2) for line in Path("/proc/self/cgroup").read_text().splitlines())
            for ctrl in (ctrls.split(",") if ctrls else [""])
        )  # fmt: skip
    except (OSError, ValueError):
        own = {}
    reasons = []
    # cgroup v2: a named (delegated) parent, else next to or under our own cgroup.
    v2 = next((mp for mp, fstype, _ in mounts if fstype == "cgroup2"), None)
    if setting != "auto":
        parents = [Path(setting)]
    elif v2 is not None and "" in own:
        base = Path(v2) / own[""].lstrip("/")
        parents = [base] + ([base.parent] if base != Path(v2) else [])
    else:
        parents = []
        reasons.append("no cgroup v2 mounted")
    for parent in parents:
        try:
            controllers = set((parent / "cgroup.controllers").read_text().split())
            if not {"memory", "pids"} <= controllers:
                reasons.append(f"{parent}: memory and pids controllers not available in cgroup v2")
                continue
            if not {"memory", "pids"} <= set((parent / "cgroup.subtree_control").read_text().split()):
                _write(parent / "cgroup.subtree_control", "+memory +pids")
        except OSError as exc:
            reasons.append(f"{parent}: {exc.strerror or exc}")
            continue
        d = parent / name
        try:
            d.mkdir()
            if memory is not None:
                _write(d / "memory.max", str(memory))
                if (d / "memory.swap.max").exists():
                    _write(d / "memory.swap.max", "0")
            _write(d / "pids.max", pids)
            return Cgroup([d], 2), ""
        except OSError as exc:
            with contextlib.suppress(OSError):
                d.rmdir()
            reasons.append(f"{d}: {exc.strerror or exc}")
    if setting != "auto":
        return None, "; ".join(reasons)
    # cgroup v1 (hybrid hosts): one directory in the memory hierarchy, one in the pids hierarchy.
    v1 = {
        ctrl: mp
        for mp, fstype, opts in mounts
        if fstype == "cgroup"
        for ctrl in ("memory", "pids")
        if ctrl in opts
    }
    if set(v1) != {"memory", "pids"}:
        reasons.append("no cgroup v1 memory and pids hierarchies")
        return None, "; ".join(reasons)
    made: list[Path] = []
    try:
        for ctrl in ("memory", "pids"):
            d = Path(v1[ctrl]) / own.get(ctrl, "/").lstrip("/") / name
            d.mkdir()
            made.append(d)
        if memory is not None:
            _write(made[0] / "memory.limit_in_bytes", str(memory))
            if (made[0] / "memory.memsw.limit_in_bytes").exists():
                _write(made[0] / "memory.memsw.limit_in_bytes", str(memory))
        _write(made[1] / "pids.max", pids)
        return Cgroup(made, 1), ""
    except OSError as exc:
        for d in made:
            with contextlib.suppress(OSError):
                d.rmdir()
        reasons.append(f"cgroup v1: {exc.strerror or exc}")
        return None, "; ".join(reasons)
