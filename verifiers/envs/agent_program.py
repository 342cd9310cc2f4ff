"""Run one agent program: a fresh working directory, a minimal environment, a bounded lifetime.

Why a launcher: agent programs start helpers (shells, MCP servers, language servers), and some
detach from the program (``setsid``, a double fork). On Linux the program runs under
`verifiers.envs.agent_reaper`, a child subreaper that ends every process the program started,
wherever it moved, when the program exits, on timeout and on cancellation. The runner signals
the launcher and waits for it; only if the launcher itself does not finish in time is its
process group killed. Elsewhere (or with ``reap=False``) the program is started in a new session
and its process group is ended, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence

from pydantic import BaseModel

from verifiers.errors import AgentError
from verifiers.tools.capture import CapturingProtocol

TERM_GRACE_S = 2.0
"""Seconds between SIGTERM and SIGKILL when a program is ended."""
LAUNCHER_MARGIN_S = 5.0
"""Seconds the launcher gets beyond the grace to end everything, before its group is killed."""
REAPER_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "agent_reaper.py")
log = logging.getLogger(__name__)


class ProgramRun(BaseModel):
    """How one run of an agent program ended (``state["agent"]`` holds it, with the calls)."""

    command: list[str]
    exit_code: int | None
    timed_out: bool = False
    stdout: str = ""
    stderr: str = ""
    duration_s: float = 0.0
    pid: int = 0
    """The program's pid (not the launcher's)."""
    isolated: bool = False
    """It ran in its own namespaces (``AgentEnv(isolation=...)``), the gateway its only network peer."""
    memory_exceeded: bool = False
    """With ``AgentEnv(memory_mb=...)``: the cgroup's OOM killer ended a process of the run."""
    processes_exceeded: bool = False
    """With ``AgentEnv(max_processes=...)``: a fork failed because the run had its maximum of processes."""


def minimal_env(home: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The program's environment: nothing of the caller's except ``PATH`` and the locale.

    API keys and tokens in the caller's environment must not reach a program under training;
    ``extra`` (the gateway variables, the environment author's ``env=``) is added on top.
    """
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "LANG": "C.UTF-8",
        "HOME": home,
        "TMPDIR": home,
        "PYTHONUNBUFFERED": "1",
    }
    env.update(extra or {})
    return env


def reaper_available() -> bool:
    """Whether programs run under the subreaper launcher here (Linux, with a Python to run it)."""
    return sys.platform == "linux" and bool(sys.executable)


def _launcher_argv(command: Sequence[str], status_fd: int, cgroup_procs: Sequence[str]) -> list[str]:
    # -I: the launcher ignores PYTHON* variables (the program still gets them); -S: no site-packages
    # (their .pth files, editable installs' finders, cost more than the launcher's whole run).
    argv = [sys.executable, "-I", "-S", "-B", REAPER_PATH, "--status-fd", str(status_fd), "--parent", str(os.getpid()),
            "--grace", repr(TERM_GRACE_S)]
    for path in cgroup_procs:
        argv += ["--cgroup-procs", path]
    return [*argv, "--", *command]


class _StatusPipe:
    """The launcher's status lines as they come; ``program_exited`` is set by its ``exit`` line, so a
    program that ended in time is not counted as timed out while the launcher still cleans up."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int) -> None:
        self.loop, self.fd = loop, fd
        self.lines: list[tuple[str, str]] = []
        self.program_exited = asyncio.Event()
        self._buffer = b""
        os.set_blocking(fd, False)
        loop.add_reader(fd, self._read)

    def _read(self) -> bool:
        try:
            chunk = os.read(self.fd, 65536)
        except BlockingIOError:
            return False
        except OSError:
            chunk = b""
        if not chunk:  # the launcher has exited
            self.loop.remove_reader(self.fd)
            return False
        *complete, self._buffer = (self._buffer + chunk).split(b"\n")
        for line in complete:
            kind, _, text = line.decode(errors="replace").partition(" ")
            self.lines.append((kind, text))
            if kind == "exit":
                self.program_exited.set()
        return True

    def close(self) -> list[tuple[str, str]]:
        """Read what is left (the launcher has exited) and close the pipe."""
        while self._read():
            pass
        self.loop.remove_reader(self.fd)
        os.close(self.fd)
        return self.lines


async def _first(*events: asyncio.Event) -> None:
    waiters = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


async def _end_group(pid: int, exited: asyncio.Event) -> None:
    """SIGTERM the group, give it a moment, then SIGKILL whatever is left of it."""
    _signal_group(pid, signal.SIGTERM)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(exited.wait(), TERM_GRACE_S)
    _signal_group(pid, signal.SIGKILL)


async def run_program(
    command: Sequence[str],
    cwd: str,
    env: Mapping[str, str],
    timeout_s: float | None,
    max_output_chars: int = 8000,
    *,
    reap: bool = True,
    cgroup_procs: Sequence[str] = (),
) -> ProgramRun:
    """Run ``command`` to completion or timeout; everything it started is gone on return.

    ``reap`` (on Linux): run it under the subreaper launcher, which also ends what left the
    process group; ``cgroup_procs``: the ``cgroup.procs`` files it joins before it starts (needs
    ``reap``). Otherwise only its process group is ended.
    """
    reap = reap and reaper_available()
    if cgroup_procs and not reap:
        raise AgentError("a cgroup for the agent program needs the launcher (Linux)")
    loop = asyncio.get_running_loop()
    started = time.perf_counter()
    status_r, status_w = os.pipe() if reap else (-1, -1)
    argv = _launcher_argv(command, status_w, cgroup_procs) if reap else list(command)
    try:
        transport, proto = await loop.subprocess_exec(
            lambda: CapturingProtocol(max_output_chars),
            *argv,
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            pass_fds=(status_w,) if reap else (),
        )
    except (FileNotFoundError, PermissionError) as exc:
        if reap:
            os.close(status_r)
        raise AgentError(f"could not start the agent program {list(command)!r}: {exc}") from exc
    finally:
        if reap:
            os.close(status_w)
    pid = transport.get_pid()
    status = _StatusPipe(loop, status_r) if reap else None
    timed_out = False
    try:
        try:
            ended = _first(proto.exited, status.program_exited) if status else proto.exited.wait()
            await asyncio.wait_for(ended, timeout_s)
        except TimeoutError:
            timed_out = True
            if status:  # the launcher ends the program and all it started, then exits
                _signal(pid, signal.SIGTERM)
            else:
                await _end_group(pid, proto.exited)
        if status:  # it may still be ending what the program left running (up to the grace)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proto.exited.wait(), TERM_GRACE_S + LAUNCHER_MARGIN_S)
            if not proto.exited.is_set():
                log.warning("the agent program's launcher (pid %d) did not finish in time: killing its group", pid)
        # Helpers the program left behind in its group (background shells, servers) end with it.
        _signal_group(pid, signal.SIGKILL)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proto.finished.wait(), 5.0)
    except asyncio.CancelledError:
        if status:  # SIGUSR1: end everything now, no grace; a moment for the launcher to do it
            _signal(pid, signal.SIGUSR1)
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(proto.exited.wait(), LAUNCHER_MARGIN_S)
        _signal_group(pid, signal.SIGKILL)
        transport.close()
        raise
    finally:
        lines = status.close() if status else []
    exit_code = transport.get_returncode()
    transport.close()
    program_pid = pid
    for kind, text in lines:
        if kind == "pid":
            program_pid = int(text)
        elif kind == "error":
            raise AgentError(f"could not start the agent program {list(command)!r}: {text}")
        elif kind == "left":
            log.warning("processes of the agent program %r did not die of SIGKILL: %s", list(command), text)
        elif kind == "note":
            log.warning("agent program launcher: %s", text)
    return ProgramRun(
        command=list(command),
        exit_code=exit_code,
        timed_out=timed_out,
        stdout=proto.stdout.text(),
        stderr=proto.stderr.text(),
        duration_s=time.perf_counter() - started,
        pid=program_pid,
    )
