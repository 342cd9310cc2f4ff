"""Run an agent program in the sandbox's namespaces, with the gateway as its only way out.

Why: a program under training explores. Run as a plain subprocess it shares the host's network
(other local services, the inference server itself, the internet), its process table and its
filesystem. Isolated (`verifiers.tools.sandbox_exec`), it has its own PID, mount, IPC and empty
network namespaces, a read-only host with a private ``/tmp`` and its working directory writable,
and no capabilities. A relay in its namespace listens on ``127.0.0.1:<gateway port>`` and
forwards to the gateway's Unix socket, so ``OPENAI_BASE_URL`` works unchanged and nothing else
on the network answers. When its namespace's init exits the kernel kills every process left in
it, so nothing the program started (a ``setsid`` daemon included) outlives the rollout.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, Field

from verifiers.envs.agent_program import ProgramRun, run_program
from verifiers.errors import AgentError, AgentIsolationError
from verifiers.tools.sandbox_exec import EXEC_BOOTSTRAP

__all__ = ["ISOLATION_PROCESSES", "AgentIsolation", "Isolation", "isolation_unavailable", "run_isolated",
           "run_with_isolation", "will_isolate"]

Isolation = Literal["none", "auto", "require"]

TMP_MB = 1024
"""Size cap of the program's private ``/tmp`` (a tmpfs: memory, allocated as it is written)."""
ISOLATION_PROCESSES = 11
"""Tasks of an isolated run that are not the program's: the bootstrap, the namespace's init, the
relay's accept thread and two threads per model connection (for up to four at once). A cgroup's
process cap (``AgentEnv(max_processes=...)``) holds the whole namespace, so it adds these."""

_PROTECTIONS = ("namespaces", "readonly_fs", "private_tmp")
_HOW = {
    "namespaces": "run as root, or enable unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, "
    "user.max_user_namespaces > 0; on Ubuntu also kernel.apparmor_restrict_unprivileged_userns=0)",
    "readonly_fs": "needs bind remounts in the program's mount namespace",
    "private_tmp": "needs tmpfs in the program's mount namespace",
}
log = logging.getLogger(__name__)


class AgentIsolation(BaseModel):
    """Which protections an agent run had; ``reasons`` says why each missing one is missing."""

    namespaces: bool = Field(False, description="PID, mount, IPC, network namespaces; no capabilities; seccomp.")
    readonly_fs: bool = Field(False, description="The host's filesystem read-only (the working directory not).")
    private_tmp: bool = Field(False, description="/tmp is a private tmpfs that dies with the run.")
    reasons: dict[str, str] = Field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return all(getattr(self, k) for k in _PROTECTIONS)

    def missing(self) -> str:
        """Each missing protection, why it is missing, and how to get it."""
        parts = []
        for key in (k for k in _PROTECTIONS if not getattr(self, k)):
            reason = self.reasons.get(key) or "unavailable"
            if key != "namespaces" and not self.namespaces:
                parts.append(f"{key} (comes with namespaces)")
            elif reason.startswith("relay:"):
                parts.append(f"{key} ({reason}: the gateway's Unix socket must exist and accept connections)")
            else:
                parts.append(f"{key} ({reason}: {_HOW[key]})")
        return "; ".join(parts)

    def refusal(self) -> str:
        """The error text for ``isolation="require"``."""
        return (f"isolation='require': the agent program cannot be isolated on this machine; missing: "
                f"{self.missing()}. Or use AgentEnv(isolation='auto') to run it unisolated where isolation "
                "is unavailable.")


def program_paths(command: Sequence[str]) -> list[str]:
    """What the program needs to see even where the isolation hides it (under the private /tmp):
    the folders of the files its command names (its script), and its interpreter's installation
    (a virtualenv's packages), read-only."""
    paths: set[str] = set()
    for arg in command:
        if os.path.isabs(arg) and os.path.exists(arg):
            real = os.path.realpath(arg)
            paths.add(real if os.path.isdir(real) else os.path.dirname(real))
    exe = shutil.which(command[0]) if command else None
    if exe:
        bindir = os.path.dirname(os.path.abspath(exe))  # a venv's bin/, not the interpreter it links to
        paths.add(os.path.dirname(bindir))
        paths.add(os.path.dirname(os.path.dirname(os.path.realpath(exe))))
    return sorted(paths)


def _bootstrap(command: Sequence[str], workdir: str, port: int, unix_path: str, report: str) -> list[str]:
    config = {
        "argv": list(command),
        "workdir": workdir,
        "readable": program_paths(command),
        "writable": [workdir],
        "hidden": [],
        "disk_mb": TMP_MB,
        "network": False,
        "isolation_file": report,
        "relay": {"port": port, "socket": unix_path},
    }
    # -I: the bootstrap ignores PYTHON* variables (the program still gets them); -B: no .pyc.
    return [sys.executable, "-I", "-B", "-c", EXEC_BOOTSTRAP, json.dumps(config)]


def _read_report(path: Path, exit_code: int | None, stderr: str) -> AgentIsolation:
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError):
        why = f"the isolation bootstrap exited with {exit_code} before reporting: {stderr.strip()[-800:]}"
        return AgentIsolation(reasons=dict.fromkeys(_PROTECTIONS, why))
    got = report.get("isolation") or {}
    return AgentIsolation(**{k: bool(got.get(k)) for k in _PROTECTIONS},
                          reasons={str(k): str(v) for k, v in (report.get("reasons") or {}).items()})


async def run_isolated(
    command: Sequence[str],
    workdir: str,
    env: Mapping[str, str],
    timeout_s: float | None,
    unix_path: str,
    max_output_chars: int = 8000,
    cgroup_procs: Sequence[str] = (),
) -> tuple[ProgramRun | None, AgentIsolation]:
    """Run ``command`` isolated; ``(None, report)`` when the isolation could not be had (nothing ran).

    The relay listens on the port of ``env["OPENAI_BASE_URL"]`` and forwards to ``unix_path``;
    the bootstrap, and so everything in the namespace, joins ``cgroup_procs``.
    """
    port = urlsplit(env["OPENAI_BASE_URL"]).port
    if port is None:
        raise AgentIsolationError(f"OPENAI_BASE_URL has no port: {env['OPENAI_BASE_URL']!r}")
    with tempfile.TemporaryDirectory(prefix="vf-agent-ctl-") as ctl:
        report_path = Path(ctl) / "isolation.json"
        report_path.touch()
        run = await run_program(_bootstrap(command, workdir, port, unix_path, str(report_path)), workdir, env,
                                timeout_s, max_output_chars, cgroup_procs=cgroup_procs)
        report = _read_report(report_path, run.exit_code, run.stderr)
    if not report.complete:
        if run.timed_out:  # the setup itself hung (never seen): a timeout, not a refusal
            report.reasons.setdefault("namespaces", "timed out while setting up")
            return run.model_copy(update={"command": list(command)}), report
        return None, report
    if run.exit_code == 127 and "vf-sandbox: cannot execute" in run.stderr:
        raise AgentError(f"could not start the agent program {list(command)!r}: {run.stderr.strip()}")
    return run.model_copy(update={"command": list(command), "isolated": True}), report


_UNAVAILABLE: list[AgentIsolation] = []  # set once "auto" found isolation missing on this machine


def will_isolate(mode: Isolation) -> bool:
    """Whether the next run in ``mode`` tries to isolate the program ("auto" stops trying once it failed)."""
    return mode == "require" or (mode == "auto" and not _UNAVAILABLE)


async def run_with_isolation(
    mode: Isolation,
    command: Sequence[str],
    workdir: str,
    env: Mapping[str, str],
    timeout_s: float | None,
    unix_path: str,
    max_output_chars: int = 8000,
    cgroup_procs: Sequence[str] = (),
) -> ProgramRun:
    """``mode`` "require": isolated or `AgentIsolationError`; "auto": isolated where possible (a
    one-time warning, then unisolated runs); "none": a plain process (under the subreaper launcher,
    `verifiers.envs.agent_reaper`, on Linux). Every mode joins ``cgroup_procs`` when given."""
    if mode == "none" or (mode == "auto" and _UNAVAILABLE):
        return await run_program(command, workdir, env, timeout_s, max_output_chars, cgroup_procs=cgroup_procs)
    run, report = await run_isolated(command, workdir, env, timeout_s, unix_path, max_output_chars, cgroup_procs)
    if run is not None:
        return run
    if mode == "require":
        raise AgentIsolationError(report.refusal())
    if not _UNAVAILABLE:
        _UNAVAILABLE.append(report)
        log.warning("AgentEnv(isolation='auto'): agent programs run UNISOLATED on this machine (host network, "
                    "processes and filesystem); missing: %s", report.missing())
    return await run_program(command, workdir, env, timeout_s, max_output_chars, cgroup_procs=cgroup_procs)


def isolation_unavailable() -> str | None:
    """Why agent programs cannot be isolated here (``None`` when they can): one real trial run of ``true``.

    For tests and for checking a machine before a long run; it needs no gateway (a throwaway Unix
    socket stands in for it).
    """
    with tempfile.TemporaryDirectory(prefix="vf-agent-probe-") as ctl:
        sock_path = os.path.join(ctl, "probe.sock")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server, \
                socket.socket(socket.AF_INET, socket.SOCK_STREAM) as port_holder:
            server.bind(sock_path)
            server.listen(4)
            port_holder.bind(("127.0.0.1", 0))  # a port number that exists; the relay binds it in its own netns
            port = port_holder.getsockname()[1]
            report_path = os.path.join(ctl, "isolation.json")
            Path(report_path).touch()
            argv = _bootstrap(["true"], ctl, port, sock_path, report_path)
            try:
                done = subprocess.run(argv, cwd=ctl, env={"PATH": os.environ.get("PATH", os.defpath)},
                                      capture_output=True, text=True, timeout=30, check=False)
            except subprocess.TimeoutExpired:
                return "the isolation bootstrap did not finish within 30 s"
            report = _read_report(Path(report_path), done.returncode, done.stderr)
    if report.complete and done.returncode == 0:
        return None
    if report.complete:
        return f"the isolated trial run exited with {done.returncode}: {done.stderr.strip()[-500:]}"
    return report.refusal()
