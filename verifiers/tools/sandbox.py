"""Run model-written Python in a child process with resource limits.

What this protects against -- mistakes, not malice:

* runaway CPU (RLIMIT_CPU: the child is killed by SIGXCPU),
* runaway memory (RLIMIT_AS: allocations fail with MemoryError),
* runaway disk writes (RLIMIT_FSIZE caps any single file; no core dumps),
* runaway wall time (the whole process group is SIGKILLed at the deadline),
* accidental network use (a new network namespace when the kernel allows it, and in any
  case an audit hook that refuses inet connect / bind / send and DNS look-ups),
* leftover files (every run gets a fresh temporary directory as cwd and HOME, removed
  afterwards),
* leaked processes (the child leads its own process group, killed on timeout, on
  cancellation and after a normal exit, so background children die too),
* flooding the caller (stdout / stderr are drained concurrently but only a bounded
  head and tail are kept, so printing gigabytes neither blocks nor eats memory).

What it does NOT protect against: malicious code. The child runs as the same user with
the same read access to the filesystem (it can read your files and write anywhere you
can), audit hooks are trivially bypassed with ctypes or by spawning another program,
a root child can raise its own limits, and a process that calls setsid() escapes the
group kill. For hostile code use a container, a VM or gVisor. POSIX (Linux) only.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from pydantic import BaseModel, Field

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
    if not config["network"]:
        _vf_isolate_network()
    _vf_limit(config)
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
        config = {
            "main": str(main),
            "status": str(status),
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
    returncode = transport.get_returncode()
    return SandboxResult(
        stdout=protocol.stdout.text(),
        stderr=protocol.stderr.text(),
        exit_code=None if timed_out else returncode,
        timed_out=timed_out,
        memory_exceeded=memory_error,
        cpu_exceeded=not timed_out and returncode == -signal.SIGXCPU,
        duration_s=duration,
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
