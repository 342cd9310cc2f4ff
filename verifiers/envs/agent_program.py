"""Run one agent program: a fresh working directory, a minimal environment, a bounded lifetime.

Why a process group per run: agent programs start helpers (shells, MCP servers, language
servers). Ending only the direct child would leave those running after the rollout, so the
program is started in a new session and the whole group is ended on exit, on timeout and
on cancellation.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence

from pydantic import BaseModel

from verifiers.errors import AgentError
from verifiers.tools.capture import CapturingProtocol

TERM_GRACE_S = 2.0
"""Seconds between SIGTERM and SIGKILL when a program is ended."""


class ProgramRun(BaseModel):
    """How one run of an agent program ended (``state["agent"]`` holds it, with the calls)."""

    command: list[str]
    exit_code: int | None
    timed_out: bool = False
    stdout: str = ""
    stderr: str = ""
    duration_s: float = 0.0
    pid: int = 0
    isolated: bool = False
    """It ran in its own namespaces (``AgentEnv(isolation=...)``), the gateway its only network peer."""


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
) -> ProgramRun:
    """Run ``command`` to completion or timeout; its whole process group is gone on return."""
    loop = asyncio.get_running_loop()
    started = time.perf_counter()
    try:
        transport, proto = await loop.subprocess_exec(
            lambda: CapturingProtocol(max_output_chars),
            *command,
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    except (FileNotFoundError, PermissionError) as exc:
        raise AgentError(f"could not start the agent program {list(command)!r}: {exc}") from exc
    pid = transport.get_pid()
    timed_out = False
    try:
        try:
            await asyncio.wait_for(proto.exited.wait(), timeout_s)
        except TimeoutError:
            timed_out = True
            await _end_group(pid, proto.exited)
        # Helpers the program left behind in its group (background shells, servers) end with it.
        _signal_group(pid, signal.SIGKILL)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proto.finished.wait(), 5.0)
    except asyncio.CancelledError:
        _signal_group(pid, signal.SIGKILL)
        transport.close()
        raise
    exit_code = transport.get_returncode()
    transport.close()
    return ProgramRun(
        command=list(command),
        exit_code=exit_code,
        timed_out=timed_out,
        stdout=proto.stdout.text(),
        stderr=proto.stderr.text(),
        duration_s=time.perf_counter() - started,
        pid=pid,
    )
