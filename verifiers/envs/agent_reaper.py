"""The launcher every agent program runs under on Linux: nothing the program starts outlives its run.

Why: ending the program's process group misses whatever left the group, such as a ``setsid``
daemon, the grandchild of a double fork or a helper that ignores SIGTERM. This launcher
marks itself a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``), so every orphan the program leaves
is reparented to it rather than to init, and it can find them all by walking the PPid chains in
``/proc``. When the program exits, or the launcher gets SIGTERM (the rollout's timeout or end), it
sends SIGTERM (and SIGCONT) to every descendant. After a grace period it sends SIGKILL to whatever
is left, and it keeps reaping until it has no child at all. Then it exits with the program's status
(re-raising the program's signal when the program died of one), so the caller sees the program's
exit code. SIGUSR1 does the same with no grace period (a cancelled rollout). The launcher writes
nothing to stdout or stderr: the program's own output passes through untouched.

Stdlib only, and started by path (``python -I -S -B .../agent_reaper.py [options] -- CMD...``)
because it runs with the program's minimal environment, which need not be able to import
``verifiers``. ``python -m verifiers.envs.agent_reaper -- CMD...`` works too. Elsewhere than Linux
there is no subreaper: `verifiers.envs.agent_program` does not use this launcher and ends the
program's process group, as it did before (a daemon that left the group survives there).

Options: ``--status-fd N``, a pipe to the caller, gets the lines ``pid <n>`` (the program started),
``error <text>`` (it could not start: exit 127), ``exit`` (it exited; the launcher now ends what
it left), ``left <pid> ...`` (processes that did not die
within ``GIVE_UP_S`` of SIGKILL, e.g. stuck in the kernel) and ``note <text>`` (something to log). ``--parent PID`` is the caller. If the
caller dies, the launcher ends the run as if it had got SIGTERM. ``--grace S`` is the time between
SIGTERM and SIGKILL. ``--cgroup-procs PATH`` (repeatable) is a ``cgroup.procs`` file that the
program joins before it executes, so that cgroup's caps cover the program and all it starts.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import subprocess
import sys
import time

__all__ = ["GIVE_UP_S", "PROC", "descendants", "main"]

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
GIVE_UP_S = 10.0
"""Seconds after the first SIGKILL before the launcher stops waiting for what still runs."""
PROC = "/proc"

_STOP = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
_URGENT = signal.SIGUSR1
_WATCHED = {*_STOP, _URGENT, signal.SIGCHLD}


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, ctypes.c_ulong(value), ctypes.c_ulong(0), ctypes.c_ulong(0),
                          ctypes.c_ulong(0)) == 0
    except (OSError, AttributeError):
        return False


def descendants(root: int) -> list[int]:
    """Every live (not zombie) process whose PPid chain leads to ``root``, from a walk of /proc."""
    children: dict[int, list[int]] = {}
    alive: set[int] = set()
    for name in os.listdir(PROC):
        if not name.isdigit():
            continue
        try:
            with open(f"{PROC}/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:  # it exited between the listing and the read
            continue
        children.setdefault(int(fields[1]), []).append(int(name))
        if fields[0] not in (b"Z", b"X"):
            alive.add(int(name))
    found, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return [p for p in found if p in alive]


class _Launcher:
    def __init__(self, status_fd: int | None, grace_s: float) -> None:
        self.status_fd = status_fd
        self.grace_s = grace_s
        self.program: int | None = None
        self._popen: subprocess.Popen[bytes] | None = None
        self.status: int | None = None
        """The program's wait status, once reaped."""

    def tell(self, line: str) -> None:
        if self.status_fd is not None:
            with contextlib.suppress(OSError):
                os.write(self.status_fd, (line.replace("\n", " ") + "\n").encode(errors="replace"))

    def reap(self) -> bool:
        """Collect every child that exited; False once there is no child left at all."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return False
            if pid == 0:
                return True
            if pid == self.program:
                self.status = status

    def start(self, argv: list[str], cgroup_procs: list[str]) -> bool:
        def in_child() -> None:  # after fork, before exec: join the cgroups, take the signals back
            for path in cgroup_procs:
                try:
                    with open(path, "w") as f:
                        f.write(str(os.getpid()))
                except OSError as exc:
                    self.tell(f"error cannot join the cgroup {path}: {exc.strerror or exc}")
                    raise
            signal.pthread_sigmask(signal.SIG_SETMASK, [])

        try:
            self._popen = subprocess.Popen(argv, preexec_fn=in_child)  # preexec_fn: the launcher has one thread
            self.program = self._popen.pid
        except OSError as exc:
            self.tell(f"error {exc}")
            return False
        except subprocess.SubprocessError:  # in_child failed and said why
            return False
        self.tell(f"pid {self.program}")
        return True

    def wait(self) -> bool:
        """Until the program exits (True) or a stop signal comes (False: SIGUSR1 means no grace)."""
        while True:
            self.reap()
            if self.status is not None:
                self.tell("exit")
                return True
            info = signal.sigtimedwait(_WATCHED, 1.0)
            if info is not None and info.si_signo != signal.SIGCHLD:
                if info.si_signo == _URGENT:
                    self.grace_s = 0.0
                return False

    def end_all(self) -> list[int]:
        """SIGTERM every descendant, SIGKILL what is left after the grace, reap until no child is left."""
        me = os.getpid()
        now = time.monotonic()
        kill_at, termed = now + self.grace_s, set()
        while self.reap():
            now = time.monotonic()
            pids = descendants(me)
            if now >= kill_at + GIVE_UP_S:
                return pids
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    if now >= kill_at:
                        os.kill(pid, signal.SIGKILL)
                    elif pid not in termed:
                        os.kill(pid, signal.SIGTERM)
                        os.kill(pid, signal.SIGCONT)  # a stopped process acts on SIGTERM only when continued
                        termed.add(pid)
            info = signal.sigtimedwait(_WATCHED, 0.02 if now < kill_at else 0.005)
            if info is not None and info.si_signo == _URGENT:
                kill_at = min(kill_at, time.monotonic())
        return []

    def exit(self) -> None:
        """Leave as the program did: its exit code, or death by its signal."""
        status = self.status
        if status is None:
            os._exit(125)
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            with contextlib.suppress(ValueError, OSError):  # no core file of the launcher's own
                resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
            with contextlib.suppress(ValueError, OSError):  # SIGKILL and SIGSTOP have no handler to reset
                signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
            os.kill(os.getpid(), sig)
            os._exit(128 + sig)
        os._exit(os.waitstatus_to_exitcode(status))


def _parse(args: list[str]) -> tuple[dict[str, list[str]], list[str]]:
    if "--" not in args:
        raise SystemExit("usage: agent_reaper.py [--status-fd N] [--parent PID] [--grace S] "
                         "[--cgroup-procs PATH]... -- COMMAND [ARG]...")
    split = args.index("--")
    opts: dict[str, list[str]] = {}
    head = args[:split]
    for key, value in zip(head[::2], head[1::2], strict=True):
        opts.setdefault(key, []).append(value)
    return opts, args[split + 1:]


def main(args: list[str]) -> None:
    opts, argv = _parse(args)
    if not argv:
        raise SystemExit("agent_reaper.py: no command after --")
    status_fd = int(opts["--status-fd"][0]) if "--status-fd" in opts else None
    if status_fd is not None:
        os.set_inheritable(status_fd, False)
    launcher = _Launcher(status_fd, float(opts.get("--grace", ["2.0"])[0]))
    signal.pthread_sigmask(signal.SIG_BLOCK, _WATCHED)
    if not _prctl(PR_SET_CHILD_SUBREAPER, 1):  # not Linux, or a kernel before 3.4: the group alone
        launcher.tell("note prctl(PR_SET_CHILD_SUBREAPER) failed: orphans of the program are not found")
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    parent = int(opts["--parent"][0]) if "--parent" in opts else None
    if launcher.start(argv, opts.get("--cgroup-procs", [])):
        if parent is None or os.getppid() == parent:  # else the caller died before PDEATHSIG was set
            launcher.wait()
        left = launcher.end_all()
        if left:
            launcher.tell("left " + " ".join(map(str, left)))
        launcher.exit()
    os._exit(127)


if __name__ == "__main__":
    main(sys.argv[1:])
