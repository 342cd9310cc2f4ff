"""Run model-written Python in a child process with resource limits and, on Linux, namespaces.

RL policies explore and reward-hack: the code a tool runs is hostile input. Where the kernel
allows it (root, or unprivileged user namespaces), each run gets its own namespaces, which is
what ``isolated=True`` on the result reports:

* its own PID namespace: the caller's and the host's processes are invisible and cannot be
  signalled (``kill(-1)`` reaches only the run's own processes), and when the run ends its
  whole namespace is killed, so no descendant survives it (``setsid``/``setpgid`` included);
* its own ``/proc``: no ``/proc/<caller>/environ`` or ``/mem`` to read the caller's secrets from;
* its own IPC namespace and a private ``/dev/shm``: no shared memory outlives the run;
* its own, empty network namespace (unless ``network=True``), plus an audit hook that refuses
  inet connect / bind / send and DNS look-ups;
* no capabilities (bounding set, effective, permitted, ambient all cleared; ``no_new_privs``;
  for root, the securebits that stop uid 0 from regaining them), and a seccomp filter that
  refuses Unix-domain sockets, ``setns``/``unshare``/``mount``, ``ptrace`` and kernel-module,
  keyring, BPF and perf calls.

Always, isolated or not:

* runaway CPU (RLIMIT_CPU: the child is killed by SIGXCPU), memory (RLIMIT_AS: allocations
  fail with MemoryError) and file size (RLIMIT_FSIZE; no core dumps);
* runaway wall time (the process group, and with it the namespace, is SIGKILLed at the deadline);
* a minimal environment (none of the caller's variables), a fresh temporary directory as cwd
  and HOME, removed afterwards;
* bounded output: stdout / stderr are drained concurrently, only a head and tail are kept.

What it does NOT protect against: the child runs as the caller's user (root stays uid 0, but
without capabilities), so it can read every file that user can read and write where that user
can (``/tmp`` included; such files outlive the run); it shares the kernel (a kernel exploit
escapes); CPU and memory are per process, so a fork bomb is bounded only by ``max_processes``;
and without namespaces (``isolated=False``: no privileges for them, or not Linux) only the
limits and the audit hook remain, which ctypes or another program bypasses. For hostile code
that must not read your files, use a container, a VM or gVisor.

``SandboxLimits.isolation``: ``"auto"`` (namespaces when available, else a logged warning and
the limits alone), ``"require"`` (refuse to run without them), ``"off"``.
"""

from __future__ import annotations

import asyncio
import codecs
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

__all__ = ["SandboxLimits", "SandboxResult", "python_tool", "run_python", "run_python_sync"]

# How long to wait for pipes / reaping once the group has been SIGKILLed. Only a process
# that left the group (setsid) and still holds a pipe open can make this wait expire.
_SETTLE_S = 2.0

# Runs inside the child (via `python -c`) before the user's code. It must not rely on
# anything outside the standard library, and its own frames are cut from tracebacks.
_BOOTSTRAP = r"""
import sys


def _vf_isolate_network():
    # A new, empty network namespace: works as root, or unprivileged where user
    # namespaces are enabled. Any failure leaves only the audit hook below.
    import ctypes
    import os

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        clone_newnet, clone_newuser = 0x40000000, 0x10000000
        if libc.unshare(clone_newnet) == 0:
            return
        uid, gid = os.getuid(), os.getgid()
        if libc.unshare(clone_newuser | clone_newnet) != 0:
            return
        for path, text in (
            ("/proc/self/setgroups", "deny"),
            ("/proc/self/uid_map", f"{uid} {uid} 1"),
            ("/proc/self/gid_map", f"{gid} {gid} 1"),
        ):
            try:
                with open(path, "w") as f:
                    f.write(text)
            except OSError:
                pass
    except Exception:
        pass


# Syscalls refused inside an isolated run (errno EPERM), by architecture. socket() is refused
# for AF_UNIX only (checked on its first argument); x86-64's x32 numbers and foreign
# architectures (e.g. i386 via int 0x80) are refused wholesale.
_VF_ARCH = {
    "x86_64": (0xC000003E, 41, {
        "setns": 308, "unshare": 272, "mount": 165, "umount2": 166, "pivot_root": 155, "ptrace": 101,
        "bpf": 321, "perf_event_open": 298, "keyctl": 250, "add_key": 248, "request_key": 249,
        "userfaultfd": 323, "init_module": 175, "finit_module": 313, "delete_module": 176,
        "kexec_load": 246, "reboot": 169, "process_vm_readv": 310, "process_vm_writev": 311,
        "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsmount": 432, "mount_setattr": 442}),
    "aarch64": (0xC00000B7, 198, {
        "setns": 268, "unshare": 97, "mount": 40, "umount2": 39, "pivot_root": 41, "ptrace": 117,
        "bpf": 280, "perf_event_open": 241, "keyctl": 219, "add_key": 217, "request_key": 218,
        "userfaultfd": 282, "init_module": 105, "finit_module": 273, "delete_module": 106,
        "kexec_load": 104, "reboot": 142, "process_vm_readv": 270, "process_vm_writev": 271,
        "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsmount": 432, "mount_setattr": 442}),
}


def _vf_report(config, **fields):
    import json

    try:
        with open(config["isolation_file"], "w") as f:
            json.dump(fields, f)
    except OSError:
        pass


def _vf_enter_namespaces(config):
    # Returns True in the isolated process that runs the code, False (in this process) when
    # namespaces are unavailable. Three processes when it works:
    #   this one (outside; waits, then exits with the code's status, signal included),
    #   an init (pid 1 of the new PID namespace; mounts /proc and /dev/shm, reaps, and on its
    #   exit the kernel kills everything left in the namespace),
    #   the runner (pid 2), which returns True here.
    import ctypes
    import os
    import signal

    libc = ctypes.CDLL(None, use_errno=True)
    ulong = ctypes.c_ulong
    newns, newipc, newpid, newnet, newuser = 0x00020000, 0x08000000, 0x20000000, 0x40000000, 0x10000000
    flags = newns | newipc | newpid | (0 if config["network"] else newnet)
    uid, gid = os.getuid(), os.getgid()
    if os.geteuid() != 0:
        flags |= newuser
    if libc.unshare(flags) != 0:
        _vf_report(config, isolated=False, reason=f"unshare: {os.strerror(ctypes.get_errno())}")
        return False
    if flags & newuser:
        for path, text in (("/proc/self/setgroups", "deny"), ("/proc/self/uid_map", f"{uid} {uid} 1"),
                           ("/proc/self/gid_map", f"{gid} {gid} 1")):
            try:
                with open(path, "w") as f:
                    f.write(text)
            except OSError:
                pass
    r, w = os.pipe()
    init = os.fork()
    if init:  # outside: relay the runner's fate
        os.close(w)
        chunks = []
        while True:
            data = os.read(r, 256)
            if not data:
                break
            chunks.append(data)
        os.waitpid(init, 0)
        msg = b"".join(chunks).decode()
        if msg.startswith("E:"):
            _vf_report(config, isolated=False, reason=msg[2:])
            return False
        if "S:" not in msg:
            os._exit(1)
        status = int(msg.split("S:", 1)[1])
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)
            os._exit(128 + sig)
        os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)
    # init, pid 1: dies with the waiting process above (and kills the namespace with it)
    os.close(r)
    try:
        libc.prctl(1, ulong(signal.SIGKILL), ulong(0), ulong(0), ulong(0))  # PR_SET_PDEATHSIG
        rec, private, nosuid, nodev, noexec = 16384, 1 << 18, 2, 4, 8
        for src, dst, fstype, mflags, data in (
            (b"none", b"/", None, rec | private, None),
            (b"proc", b"/proc", b"proc", nosuid | nodev | noexec, None),
            (b"tmpfs", b"/dev/shm", b"tmpfs", nosuid | nodev, b"size=64m,mode=1777"),
        ):
            if libc.mount(src, dst, fstype, ulong(mflags), data) != 0:
                raise OSError(f"mount {dst.decode()}: {os.strerror(ctypes.get_errno())}")
    except BaseException as exc:
        os.write(w, f"E:{exc}".encode())
        os._exit(0)
    os.write(w, b"R")
    runner = os.fork()
    if runner == 0:
        os.close(w)
        _vf_report(config, isolated=True)
        return True
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            os._exit(1)
        if pid == runner:
            os.write(w, f"S:{status}".encode())
            os._exit(0)


def _vf_drop_privileges():
    # In the runner: no capabilities, no way to regain them, and a seccomp deny-list.
    import ctypes
    import os
    import platform

    libc = ctypes.CDLL(None, use_errno=True)

    def prctl(option, arg2=0, arg3=0):
        arg3 = arg3 if not isinstance(arg3, int) else ctypes.c_ulong(arg3)
        return libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg2), arg3, ctypes.c_ulong(0), ctypes.c_ulong(0))

    prctl(38, 1)  # PR_SET_NO_NEW_PRIVS
    if os.geteuid() == 0:  # uid 0 must not get its capabilities back on exec
        prctl(28, 0x2F)  # PR_SET_SECUREBITS: NOROOT, NO_SETUID_FIXUP, KEEP_CAPS_LOCKED (+ locks)
    for cap in range(64):
        if prctl(24, cap) != 0:  # PR_CAPBSET_DROP; EINVAL past the last capability
            break
    prctl(47, 4)  # PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    libc.capset(ctypes.byref(Header(0x20080522, 0)), (Data * 2)())
    arch = _VF_ARCH.get(platform.machine())
    if arch is None:
        return
    audit_arch, socket_nr, denied = arch

    class Filter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                    ("k", ctypes.c_uint32)]

    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]

    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    allow, eperm = 0x7FFF0000, 0x00050000 | 1
    prog = [(ld, 0, 0, 4), (jeq, 1, 0, audit_arch), (ret, 0, 0, eperm), (ld, 0, 0, 0)]
    if audit_arch == 0xC000003E:
        prog += [(jge, 0, 1, 0x40000000), (ret, 0, 0, eperm)]
    for nr in denied.values():
        prog += [(jeq, 0, 1, nr), (ret, 0, 0, eperm)]
    prog += [(jeq, 1, 0, socket_nr), (ret, 0, 0, allow),
             (ld, 0, 0, 16), (jeq, 0, 1, 1), (ret, 0, 0, eperm), (ret, 0, 0, allow)]  # AF_UNIX == 1
    table = (Filter * len(prog))(*[Filter(*ins) for ins in prog])
    fprog = Prog(len(prog), table)
    if prctl(22, 2, ctypes.byref(fprog)) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        raise OSError(f"seccomp: {os.strerror(ctypes.get_errno())}")


def _vf_limit(config):
    import resource

    def setlimit(kind, soft, hard=None):
        try:
            resource.setrlimit(kind, (soft, soft if hard is None else hard))
        except (ValueError, OSError):
            pass

    # Hard CPU limit one second later: SIGXCPU first, SIGKILL if it is ignored.
    setlimit(resource.RLIMIT_CPU, config["cpu_s"], config["cpu_s"] + 1)
    setlimit(resource.RLIMIT_AS, config["memory_bytes"])
    setlimit(resource.RLIMIT_FSIZE, config["fsize_bytes"])
    setlimit(resource.RLIMIT_CORE, 0)
    if config["nproc"] is not None:
        setlimit(resource.RLIMIT_NPROC, config["nproc"])


def _vf_block_network():
    import socket

    inet = (socket.AF_INET, socket.AF_INET6)
    always = frozenset({"socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr",
                        "socket.getnameinfo"})
    inet_only = frozenset({"socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg"})

    def hook(event, args):
        if event in always or (event in inet_only and getattr(args[0], "family", None) in inet):
            raise PermissionError(f"network access is disabled in this sandbox ({event})")

    sys.addaudithook(hook)


def _vf_main():
    import json
    import linecache
    import os
    import traceback
    import types

    config = json.loads(sys.argv[1])
    isolated = config["isolation"] != "off" and _vf_enter_namespaces(config)
    if config["isolation"] == "require" and not isolated:
        sys.exit(125)
    if not config["network"] and not isolated:
        _vf_isolate_network()
    _vf_limit(config)
    if isolated:
        _vf_drop_privileges()
    if not config["network"]:
        _vf_block_network()
    path = config["main"]
    with open(path, encoding="utf-8") as f:
        source = f.read()
    # Tracebacks say "main.py", not a random temp path; seeding linecache keeps the
    # source lines in them even if the code changes directory or deletes the file.
    name = os.path.basename(path)
    linecache.cache[name] = (len(source), None, source.splitlines(True), name)
    module = types.ModuleType("__main__")
    module.__file__ = path
    sys.modules["__main__"] = module
    sys.argv = [path]
    sys.path.insert(0, os.path.dirname(path))
    try:
        exec(compile(source, name, "exec"), module.__dict__)
    except SystemExit:
        raise
    except BaseException as exc:
        if isinstance(exc, MemoryError):
            try:
                with open(config["status"], "w") as f:
                    f.write('{"memory_error": true}')
            except OSError:
                pass
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != name:
            tb = tb.tb_next
        traceback.print_exception(type(exc), exc, tb)
        sys.stderr.flush()
        sys.exit(1)


_vf_main()
"""


class SandboxLimits(BaseModel):
    """Resource limits for one run; the defaults suit short computations by a model."""

    wall_time_s: float = Field(10, gt=0, description="Wall clock limit; the process group is killed.")
    cpu_time_s: float = Field(10, gt=0, description="CPU seconds (RLIMIT_CPU, rounded up to whole seconds).")
    memory_mb: int = Field(512, gt=0, description="Address space (RLIMIT_AS), not resident memory.")
    max_output_chars: int = Field(8000, gt=0, description="Kept per stream; the middle is cut beyond this.")
    max_file_size_mb: int = Field(16, gt=0, description="Largest file the code may write (RLIMIT_FSIZE).")
    max_processes: int | None = Field(
        None,
        ge=1,
        description="RLIMIT_NPROC. Counts every process of the same user, not just the sandbox's, "
        "and is not enforced for root: leave unset unless the sandbox runs as a dedicated user.",
    )
    network: bool = Field(False, description="Allow network access.")
    isolation: Literal["auto", "require", "off"] = Field(
        "auto",
        description="Namespaces, no capabilities and a seccomp filter (see the module docstring): 'auto' uses "
        "them when the kernel allows (root, or unprivileged user namespaces), 'require' refuses to run "
        "without them, 'off' runs with the limits alone.",
    )


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
    isolated: bool = Field(False, description="The run had its own namespaces, no capabilities and seccomp.")

    def _note(self) -> str | None:
        if self.timed_out:
            return f"[timed out after {self.duration_s:.1f} s; process killed]"
        if self.cpu_exceeded:
            return "[CPU time limit exceeded; process killed]"
        if self.memory_exceeded:
            return f"[memory limit exceeded (MemoryError); exit code {self.exit_code}]"
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


class _Capture:
    """Keeps the head and tail of a stream, counting (not storing) everything between.

    Decoding incrementally lets the truncation marker give an exact character count
    and never splits a UTF-8 sequence.
    """

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self._head_max = max_chars - max_chars // 2
        self._tail_max = max_chars // 2
        self._head: list[str] = []
        self._head_len = 0
        self._tail = ""
        self.total = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, data: bytes, final: bool = False) -> None:
        text = self._decoder.decode(data, final)
        self.total += len(text)
        room = self._head_max - self._head_len
        if room > 0 and text:
            self._head.append(text[:room])
            self._head_len += min(room, len(text))
            text = text[room:]
        if text and self._tail_max:
            self._tail = (self._tail + text)[-self._tail_max :]

    def text(self) -> str:
        head = "".join(self._head)
        if self.total <= self.max_chars:
            return head + self._tail
        cut = self.total - len(head) - len(self._tail)
        return f"{head}\n... [truncated {cut} chars] ...\n{self._tail}"


class _ChildProtocol(asyncio.SubprocessProtocol):
    """Pushes output straight into bounded captures and reports the child's own exit.

    A protocol rather than `create_subprocess_exec` streams: nothing is buffered beyond
    the captures, and `process_exited` fires when the child exits even if a background
    process still holds its pipes (on 3.11 `Process.wait()` waits for those too).
    """

    def __init__(self, max_chars: int) -> None:
        self.stdout = _Capture(max_chars)
        self.stderr = _Capture(max_chars)
        self.exited = asyncio.Event()
        self.finished = asyncio.Event()  # exited and every pipe closed

    def _capture(self, fd: int) -> _Capture | None:
        return {1: self.stdout, 2: self.stderr}.get(fd)

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        capture = self._capture(fd)
        if capture is not None and isinstance(data, bytes):
            capture.feed(data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        capture = self._capture(fd)
        if capture is not None:
            capture.feed(b"", final=True)

    def process_exited(self) -> None:
        self.exited.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.finished.set()


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

    Cancelling the awaiting task kills the child's process group before re-raising.
    """
    limits = limits if limits is not None else SandboxLimits()
    with tempfile.TemporaryDirectory(prefix="vf-sandbox-", ignore_cleanup_errors=True) as root:
        workdir = Path(root) / "work"
        workdir.mkdir()
        main = workdir / "main.py"
        main.write_text(code, encoding="utf-8")
        status = Path(root) / "status.json"  # outside cwd: the user's code does not see it
        isolation_file = Path(root) / "isolation.json"
        config = {
            "main": str(main),
            "status": str(status),
            "isolation": limits.isolation,
            "isolation_file": str(isolation_file),
            "network": limits.network,
            "cpu_s": max(1, math.ceil(limits.cpu_time_s)),
            "memory_bytes": limits.memory_mb * 1024 * 1024,
            "fsize_bytes": limits.max_file_size_mb * 1024 * 1024,
            "nproc": limits.max_processes,
        }
        started = time.monotonic()
        loop = asyncio.get_running_loop()
        transport, protocol = await loop.subprocess_exec(
            lambda: _ChildProtocol(limits.max_output_chars),
            # -I: no PYTHON* env vars, no user site, no cwd on sys.path (site-packages stay
            # importable); -B: no .pyc files left behind; -u: output survives a kill.
            sys.executable, "-I", "-B", "-u", "-X", "utf8", "-c", _BOOTSTRAP, json.dumps(config),
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
        memory_error = False
        with contextlib.suppress(OSError, ValueError):
            memory_error = bool(json.loads(status.read_text()).get("memory_error"))
        isolation: dict[str, object] = {}
        with contextlib.suppress(OSError, ValueError):
            isolation = json.loads(isolation_file.read_text())
    returncode = transport.get_returncode()
    isolated = bool(isolation.get("isolated"))
    if limits.isolation != "off" and not isolated and not timed_out:
        reason = str(isolation.get("reason", "not Linux, or the child did not report"))
        if limits.isolation == "require":
            raise ConfigError(
                f"the sandbox could not isolate the run ({reason}); isolation='require' needs Linux namespaces: "
                "run as root, or enable unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1 / "
                "user.max_user_namespaces > 0), or set SandboxLimits(isolation='auto')."
            )
        _warn_unisolated(reason)
    return SandboxResult(
        stdout=protocol.stdout.text(),
        stderr=protocol.stderr.text(),
        exit_code=None if timed_out else returncode,
        timed_out=timed_out,
        memory_exceeded=memory_error,
        cpu_exceeded=not timed_out and returncode == -signal.SIGXCPU,
        duration_s=duration,
        isolated=isolated,
    )


_WARNED: set[str] = set()


def _warn_unisolated(reason: str) -> None:
    """Once per reason: the run had only resource limits, not namespaces."""
    if reason not in _WARNED:
        _WARNED.add(reason)
        logging.getLogger(__name__).warning(
            "sandboxed code ran without namespace isolation (%s): it can see and signal your processes; "
            "see verifiers.tools.sandbox for what that means", reason)


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
