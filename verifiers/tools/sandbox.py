"""Run model-written Python in a child process with resource limits and, on Linux, namespaces.

RL policies explore and reward-hack: the code a tool runs is hostile input. Each run gets, where
the machine allows it, four protections; ``SandboxResult.isolation`` says which it had (with the
reason for each one missing) and ``SandboxResult.isolated`` is true only when it had all four.

``namespaces`` (root, or unprivileged user namespaces):

* its own PID namespace: the caller's and the host's processes are invisible and cannot be
  signalled (``kill(-1)`` reaches only the run's own processes), and when the run ends its
  whole namespace is killed, so no descendant survives it (``setsid``/``setpgid`` included);
* its own ``/proc`` (read-only, so no ``/proc/sys`` or ``/proc/sysrq-trigger`` writes): no
  ``/proc/<caller>/environ`` or ``/mem`` to read the caller's secrets from;
* its own IPC namespace and a private ``/dev/shm``: no shared memory outlives the run;
* its own, empty network namespace (unless ``network=True``), plus an audit hook that refuses
  inet connect / bind / send and DNS look-ups;
* no capabilities (bounding set, effective, permitted, ambient all cleared; ``no_new_privs``;
  for root, the securebits that stop uid 0 from regaining them), and a seccomp filter that
  refuses Unix-domain sockets, ``setns``/``unshare``/``mount``/``mount_setattr``, ``ptrace`` and
  kernel-module, keyring, BPF and perf calls.

``readonly_fs`` (in the run's mount namespace): every mount of the host is read-only (one
``mount_setattr(AT_RECURSIVE, MOUNT_ATTR_RDONLY)`` on ``/``; a bind remount of each mount on
kernels before 5.12), so the code cannot plant a ``.pth`` / ``sitecustomize`` in your virtualenv,
edit your files or write your output directory. ``/dev`` is a fresh minimal one (null, zero,
full, random, urandom): the host's device nodes, a raw disk included, stay writable on a
read-only mount. The caller's current directory and ``SandboxLimits.hidden_paths`` are covered
by an empty read-only tmpfs (a hidden file by ``/dev/null``); where the Python installation lies
under a covered path it is bound back, read-only (an editable install's source is not). Without
capabilities root gets only what mode bits allow, so for root a directory on the way to the
installation or to ``writable_paths`` that uid 0 cannot enter by them (another user's home) is
covered the same way; an installation still unreadable (itself closed) is a ConfigError naming it.
``writable_paths`` are bound back read-write, at the same path.

``private_tmp``: ``/tmp`` is a private tmpfs of ``disk_mb`` that holds the work directory (cwd
and HOME, with ``main.py``); it dies with the run. Writes beyond it fail with ENOSPC and the
result says ``disk_full``.

``cgroup``: the whole process tree has one memory budget (``memory.max`` = ``memory_mb``, swap 0;
page cache and the files in its ``/tmp`` count) and one process budget (``pids.max`` =
``max_processes``, threads count). Each run gets a fresh cgroup, joined by the child before any
of its code runs and removed (its processes killed) afterwards: cgroup v2 where the memory and
pids controllers can be had (the directory named by ``VF_SANDBOX_CGROUP``, or next to / under the
caller's own cgroup, e.g. as root or in a systemd unit with ``Delegate=yes``), else, as root on
hybrid hosts, the cgroup v1 memory and pids hierarchies. ``VF_SANDBOX_CGROUP=off`` turns it off.
A run that hits them: ``memory_exceeded`` (the kernel's OOM killer SIGKILLs a process of the
run), ``processes_exceeded`` (``fork`` fails with EAGAIN). Without a cgroup (not root and no
delegated cgroup, a read-only ``/sys/fs/cgroup``, ``VF_SANDBOX_CGROUP=off``) the fallback is:
RLIMIT_AS per process, so N processes may each use ``memory_mb`` (the totals are NOT capped), and
RLIMIT_NPROC = ``max_processes`` in the run's own user namespace, which counts only the run's
processes, but exists only for isolated runs by a user other than root: for root without a
cgroup, and for unisolated runs, nothing caps the number of processes but the wall clock
(``max_processes`` set explicitly on an unisolated run is RLIMIT_NPROC over all of the user's
processes, as before).

Always, whatever the run got:

* runaway CPU (RLIMIT_CPU: the child is killed by SIGXCPU), memory per process (RLIMIT_AS:
  allocations fail with MemoryError) and file size (RLIMIT_FSIZE; no core dumps);
* runaway wall time (the process group, and with it the namespace, is SIGKILLed at the deadline);
* a minimal environment (none of the caller's variables), a fresh directory as cwd and HOME;
* bounded output: stdout / stderr are drained concurrently, only a head and tail are kept.

What it does NOT protect against: the child runs as the caller's user (root stays uid 0, but
without capabilities), so it can READ every file that user can read outside the covered paths
(your home directory, keys, other projects: list them in ``hidden_paths``); it shares the kernel
(a kernel exploit escapes); ``writable_paths`` are host directories it may fill (RLIMIT_FSIZE
bounds each file, not their number); the cgroup relies on the read-only filesystem (root could
otherwise move itself out of it); without namespaces (``isolated=False``: no privileges for them,
or not Linux) only the limits, a cgroup and the audit hook remain, and ctypes or another program
bypasses the hook. For hostile code that must not read your files, use a container, a VM or gVisor.

``SandboxLimits.isolation``: ``"auto"`` (what the machine allows, else a logged warning naming
what is missing), ``"require"`` (refuse to run, with a ConfigError naming each missing protection
and how to get it, unless all four apply), ``"off"`` (no namespaces; limits and a cgroup only).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from verifiers.errors import ConfigError
from verifiers.tools.capture import CapturingProtocol as _ChildProtocol
from verifiers.tools.sandbox_cgroup import Cgroup, make_cgroup
from verifiers.tools.sandbox_child import BOOTSTRAP

__all__ = [
    "SandboxIsolation",
    "SandboxLimits",
    "SandboxResult",
    "python_tool",
    "run_python",
    "run_python_sync",
]

# How long to wait for pipes / reaping once the group has been SIGKILLed. Only a process
# that left the group (setsid) and still holds a pipe open can make this wait expire.
_SETTLE_S = 2.0



class SandboxLimits(BaseModel):
    """Resource limits for one run; the defaults suit short computations by a model."""

    wall_time_s: float = Field(10, gt=0, description="Wall clock limit; the process group is killed.")
    cpu_time_s: float = Field(10, gt=0, description="CPU seconds (RLIMIT_CPU, rounded up to whole seconds).")
    memory_mb: int = Field(
        512,
        gt=0,
        description="Address space of each process (RLIMIT_AS), and with a cgroup the memory of the whole run "
        "(memory.max: resident memory, page cache and files in its /tmp, no swap).",
    )
    max_output_chars: int = Field(8000, gt=0, description="Kept per stream; the middle is cut beyond this.")
    max_file_size_mb: int = Field(16, gt=0, description="Largest file the code may write (RLIMIT_FSIZE).")
    max_processes: int | None = Field(
        64,
        ge=1,
        description="Processes and threads of the whole run, the code's own included: pids.max of the run's "
        "cgroup; without one, RLIMIT_NPROC in the run's own user namespace (isolated runs by a user other "
        "than root). Not enforced for root without a cgroup. Set explicitly on an unisolated run, it is "
        "RLIMIT_NPROC for every process of the user, as before. None: no limit.",
    )
    disk_mb: int = Field(
        64,
        gt=0,
        description="Size of the run's private tmpfs holding its work directory (cwd, HOME) and /tmp; "
        "writes beyond it fail with ENOSPC (result.disk_full). Counts against memory_mb with a cgroup.",
    )
    hidden_paths: list[str] = Field(
        default_factory=list,
        description="Host paths covered by an empty read-only tmpfs in the run (the caller's cwd always is): "
        "output directories, checkpoints, secrets. The Python installation stays visible, read-only.",
    )
    writable_paths: list[str] = Field(
        default_factory=list,
        description="Host directories the run may write (bound read-write at the same path; not limited by "
        "disk_mb). Everything else on the host is read-only.",
    )
    network: bool = Field(False, description="Allow network access.")
    isolation: Literal["auto", "require", "off"] = Field(
        "auto",
        description="Namespaces, a read-only host filesystem, a private /tmp and a cgroup (see the module "
        "docstring): 'auto' uses what the machine allows, 'require' refuses to run without all of them, "
        "'off' runs with the limits (and a cgroup, if available) alone.",
    )


class SandboxIsolation(BaseModel):
    """Which protections a run got; `reasons` says why each missing one is missing."""

    namespaces: bool = Field(
        False, description="PID, mount, IPC (and network) namespaces, no capabilities, seccomp."
    )
    readonly_fs: bool = Field(
        False, description="Host filesystem read-only; the caller's cwd and hidden_paths covered."
    )
    private_tmp: bool = Field(False, description="Work directory and /tmp on a private tmpfs of disk_mb.")
    cgroup: bool = Field(False, description="memory.max and pids.max for the whole process tree.")
    reasons: dict[str, str] = Field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return self.namespaces and self.readonly_fs and self.private_tmp and self.cgroup

    def missing(self) -> list[str]:
        return [k for k in _PROTECTIONS if not getattr(self, k)]


_PROTECTIONS = ("namespaces", "readonly_fs", "private_tmp", "cgroup")
_HOW = {
    "namespaces": "run as root, or enable unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, "
    "user.max_user_namespaces > 0; on Ubuntu also kernel.apparmor_restrict_unprivileged_userns=0)",
    "readonly_fs": "needs the run's mount namespace (see namespaces) and bind remounts",
    "private_tmp": "needs the run's mount namespace (see namespaces) and tmpfs",
    "cgroup": "needs a writable cgroup v2 with the memory and pids controllers (root, or a delegated cgroup, e.g. "
    "from systemd's Delegate=yes, named by VF_SANDBOX_CGROUP=/sys/fs/cgroup/<path>), or, as root, cgroup v1 "
    "memory and pids hierarchies",
}


class SandboxResult(BaseModel):
    """What a run produced. `exit_code` is None when the wall time ran out (we killed it),
    negative (-signal) when a signal ended it, as in `subprocess`."""

    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None
    timed_out: bool = False
    memory_exceeded: bool = False
    cpu_exceeded: bool = False
    duration_s: float = 0.0
    disk_full: bool = False
    processes_exceeded: bool = False
    isolated: bool = Field(
        False,
        description="The run had every protection of `isolation` (namespaces, read-only "
        "host, private /tmp, cgroup).",
    )
    isolation: SandboxIsolation = Field(default_factory=SandboxIsolation)

    def _note(self) -> str | None:
        if self.timed_out:
            return f"[timed out after {self.duration_s:.1f} s; process killed]"
        if self.cpu_exceeded:
            return "[CPU time limit exceeded; process killed]"
        if self.memory_exceeded:
            return f"[memory limit exceeded; exit code {self.exit_code}]"
        if self.disk_full:
            return f"[disk full: the work directory and /tmp are size-limited; exit code {self.exit_code}]"
        if self.processes_exceeded:
            return f"[process limit reached: fork failed; exit code {self.exit_code}]"
        if self.exit_code is not None and self.exit_code < 0:
            try:
                signame = signal.Signals(-self.exit_code).name
            except ValueError:
                signame = f"signal {-self.exit_code}"
            return f"[killed by {signame}]"
        if self.exit_code:
            return f"[exit code {self.exit_code}]"
        return None

    def to_tool_output(self) -> str:
        """Compact text for the model: stdout, then stderr, then one note if something went wrong."""
        parts = [text.rstrip("\n") for text in (self.stdout, self.stderr) if text.strip()]
        note = self._note()
        if note:
            parts.append(note)
        return "\n".join(parts) if parts else "[no output; use print() to see values]"


def _kill_group(pid: int) -> None:
    """SIGKILL the child's whole process group (it called setsid, so pgid == pid)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _child_env(home: str) -> dict[str, str]:
    """Minimal environment: nothing of the caller's secrets, one thread per numeric library."""
    env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": home, "TMPDIR": home, "LANG": "C.UTF-8"}
    # Thread pools reserve address space per thread and would trip RLIMIT_AS on big machines.
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
        env[var] = "1"
    return env


async def run_python(
    code: str, limits: SandboxLimits | None = None, stdin: str | None = None
) -> SandboxResult:
    """Run `code` as `__main__` in a fresh directory under `limits` and collect its output.

    A coroutine: ``await vf.run_python(code)`` in async code (tools, environments); from plain
    code (a script, a notebook cell without a running loop) call ``vf.run_python_sync(code)``.
    A plain ``run_python(code)`` only builds the coroutine and runs nothing.
    Cancelling the awaiting task kills the child's process group before re-raising.
    """
    limits = limits if limits is not None else SandboxLimits()
    cgroup, cgroup_reason = make_cgroup(limits.memory_mb, limits.max_processes)
    try:
        if cgroup is None and limits.isolation == "require":
            raise ConfigError(_refusal({"cgroup": cgroup_reason}))
        return await _run(code, limits, stdin, cgroup, cgroup_reason)
    finally:
        if cgroup is not None:
            await cgroup.remove()


def _refusal(reasons: dict[str, str]) -> str:
    missing = "; ".join(
        f"{k} ({reasons.get(k) or 'unavailable'}: {_HOW[k]})" for k in _PROTECTIONS if k in reasons
    )
    return (
        f"the sandbox cannot give this run every protection isolation='require' asks for; missing: {missing}. "
        "Or set SandboxLimits(isolation='auto') to run with what is available."
    )


def _read_status(path: str | os.PathLike[str]) -> tuple[set[str], str | None]:
    """The child's status file: its flags (each line's first word), and what the ``interpreter_closed``
    line says of an installation the sandboxed code cannot read (None when there is none)."""
    lines: list[str] = []
    with contextlib.suppress(OSError), open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read(4096).splitlines()
    closed = next((line.split(" ", 1)[1] for line in lines if line.startswith("interpreter_closed ")), None)
    return {line.split(" ", 1)[0] for line in lines}, closed


def _closed_installation(detail: str) -> str:
    return (
        f"the sandboxed code cannot read this Python installation: {detail}. An isolated run has no "
        "capabilities, so even root gets only what a directory's owner/group/other bits allow (nothing ran). "
        "Make that directory readable and enterable (chmod o+rx), run from an interpreter or virtualenv "
        "outside other users' private directories, or set SandboxLimits(isolation='off')."
    )


def _hidden(limits: SandboxLimits) -> list[str]:
    paths = []
    with contextlib.suppress(OSError):
        paths.append(os.getcwd())
    paths += [os.path.abspath(os.path.expanduser(p)) for p in limits.hidden_paths]
    out = []
    for path in paths:
        real = os.path.realpath(path)
        if real != "/" and real not in out:
            out.append(real)
    return out


async def _run(
    code: str, limits: SandboxLimits, stdin: str | None, cgroup: Cgroup | None, cgroup_reason: str
) -> SandboxResult:
    with tempfile.TemporaryDirectory(prefix="vf-sandbox-", ignore_cleanup_errors=True) as root:
        workdir = Path(root) / "work"
        workdir.mkdir()
        main = workdir / "main.py"
        main.write_text(code, encoding="utf-8")
        status = Path(root) / "status"  # outside cwd: the user's code does not see it
        status.touch()
        isolation_file = Path(root) / "isolation.json"
        isolation_file.touch()
        config = {
            "main": str(main),
            "workdir": str(workdir),
            "status": str(status),
            "isolation": limits.isolation,
            "isolation_file": str(isolation_file),
            "network": limits.network,
            "cpu_s": max(1, math.ceil(limits.cpu_time_s)),
            "memory_bytes": limits.memory_mb * 1024 * 1024,
            "fsize_bytes": limits.max_file_size_mb * 1024 * 1024,
            "nproc": limits.max_processes,
            "nproc_explicit": "max_processes" in limits.model_fields_set,
            "disk_mb": limits.disk_mb,
            "hidden": _hidden(limits),
            "writable": [os.path.realpath(os.path.expanduser(p)) for p in limits.writable_paths],
            "cgroup_procs": cgroup.procs if cgroup is not None else [],
            "cgroup_reason": cgroup_reason,
        }
        started = time.monotonic()
        loop = asyncio.get_running_loop()
        transport, protocol = await loop.subprocess_exec(
            lambda: _ChildProtocol(limits.max_output_chars),
            # -I: no PYTHON* env vars, no user site, no cwd on sys.path (site-packages stay
            # importable); -B: no .pyc files left behind; -u: output survives a kill.
            sys.executable, "-I", "-B", "-u", "-X", "utf8", "-c", BOOTSTRAP, json.dumps(config),
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=workdir,
            env=_child_env(str(workdir)),
            start_new_session=True,
        )  # fmt: skip
        timed_out = False
        try:
            stdin_pipe = transport.get_pipe_transport(0)
            if stdin is not None and isinstance(stdin_pipe, asyncio.WriteTransport):
                stdin_pipe.write(stdin.encode("utf-8"))  # buffered by the loop, written as read
                stdin_pipe.close()
            try:
                await asyncio.wait_for(protocol.exited.wait(), timeout=limits.wall_time_s)
            except TimeoutError:
                timed_out = True
        finally:
            # Always, not just on timeout: also covers cancellation and background children.
            # (Once the group is empty its id could in theory be reused, but not within
            # the moment between the child's exit and this call.)
            _kill_group(transport.get_pid())
            # Let the pipes drain to EOF; only a process that left the group (setsid) and
            # still holds them open can make this wait run out.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(protocol.finished.wait(), _SETTLE_S)
            transport.close()
        duration = time.monotonic() - started
        flags, closed = _read_status(status)
        report: dict[str, dict[str, object]] = {}
        with contextlib.suppress(OSError, ValueError):
            report = json.loads(isolation_file.read_text())
    returncode = transport.get_returncode()
    if closed is not None:
        raise ConfigError(_closed_installation(closed))
    got = report.get("isolation") or {}
    isolation = SandboxIsolation(
        **{k: bool(got.get(k)) for k in _PROTECTIONS},
        reasons={str(k): str(v) for k, v in (report.get("reasons") or {}).items()},
    )
    if not got:
        isolation.reasons = {k: "not Linux, or the child did not report" for k in _PROTECTIONS}
    isolated = isolation.complete
    if limits.isolation != "off" and not isolated and not timed_out:
        missing = {k: isolation.reasons.get(k, "") for k in isolation.missing()}
        if limits.isolation == "require":
            raise ConfigError(_refusal(missing))
        _warn_unisolated("; ".join(f"{k}: {v}" for k, v in missing.items()))
    return SandboxResult(
        stdout=protocol.stdout.text(),
        stderr=protocol.stderr.text(),
        exit_code=None if timed_out else returncode,
        timed_out=timed_out,
        memory_exceeded="memory_error" in flags or (cgroup is not None and cgroup.oom_killed()),
        cpu_exceeded=not timed_out and returncode == -signal.SIGXCPU,
        disk_full="disk_full" in flags,
        processes_exceeded=cgroup is not None and cgroup.pids_exceeded(),
        duration_s=duration,
        isolated=isolated,
        isolation=isolation,
    )


_WARNED: set[str] = set()


def _warn_unisolated(reason: str) -> None:
    """Once per reason: the run had only resource limits, not namespaces."""
    if reason not in _WARNED:
        _WARNED.add(reason)
        logging.getLogger(__name__).warning(
            "sandboxed code ran without some of its protections (%s); see verifiers.tools.sandbox for what "
            "each one means",
            reason,
        )


def run_python_sync(
    code: str, limits: SandboxLimits | None = None, stdin: str | None = None
) -> SandboxResult:
    """`run_python` for synchronous callers; not usable from inside a running event loop."""
    return asyncio.run(run_python(code, limits, stdin))


def python_tool(limits: SandboxLimits | None = None) -> Callable[[str], Awaitable[str]]:
    """A ready-made `python(code)` tool for ToolEnv that runs code in this sandbox."""
    fixed = (limits if limits is not None else SandboxLimits()).model_copy()

    async def python(code: str) -> str:
        """Run Python code and return what it prints.

        Args:
            code: Python source; print the values you want to see.
        """
        result = await run_python(code, fixed)
        return result.to_tool_output()

    return python
