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
under a covered path it is bound back, read-only (an editable install's source is not).
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
import codecs
import contextlib
import json
import logging
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from verifiers.errors import ConfigError

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


_VF_STATUS = None  # fd of the status file (lines such as "memory_error"), opened before any mount


def _vf_status(word):
    import os

    try:
        os.write(_VF_STATUS, (word + "\n").encode())
    except (OSError, TypeError):
        pass


def _vf_report(config, got, why):
    # Written once, by the process that is about to run the code (or refuse to), through an fd
    # opened before the mounts: the file's own path may be hidden by the private /tmp by then.
    import json
    import os

    fd = config.pop("isolation_fd", None)
    if fd is None:
        return
    try:
        os.write(fd, json.dumps({"isolation": got, "reasons": why}).encode())
        os.close(fd)
    except OSError:
        pass


def _vf_join_cgroup(config, why):
    # Before anything else runs: every process of the run, and all it forks, is in the cgroup.
    if not config["cgroup_procs"]:
        why["cgroup"] = config["cgroup_reason"]
        return False
    for path in config["cgroup_procs"]:
        try:
            with open(path, "w") as f:
                f.write("0")
        except OSError as exc:
            why["cgroup"] = f"joining {path}: {exc.strerror}"
            return False
    return True


def _vf_filesystem(libc, config, got, why, keep):
    # In the run's init, in its own mount namespace (already private): the host read-only, the
    # hidden paths covered, a private size-limited /tmp holding the work directory; the paths in
    # `keep` ({path: (fd, writable)}, opened before any of this) bound back where they were.
    import ctypes
    import os

    ulong = ctypes.c_ulong
    rdonly, nosuid, nodev, remount, bind, rec = 1, 2, 4, 32, 4096, 16384

    def mount(src, dst, fstype, flags, data=None):
        enc = (lambda v: v.encode() if isinstance(v, str) else v)
        if libc.mount(enc(src), enc(dst), enc(fstype), ulong(flags), enc(data)) != 0:
            raise OSError(f"mount {dst}: {os.strerror(ctypes.get_errno())}")

    def set_readonly(path, on, recursive):
        # mount_setattr (Linux 5.12+) changes a whole tree in one call, keeping locked flags;
        # older kernels: a bind remount of each mount, keeping the flags it has.
        class Attr(ctypes.Structure):
            _fields_ = [("set", ctypes.c_uint64), ("clr", ctypes.c_uint64), ("prop", ctypes.c_uint64),
                        ("userns", ctypes.c_uint64)]

        attr = Attr(1 if on else 0, 0 if on else 1, 0, 0)
        rc = libc.syscall(ctypes.c_long(442), ctypes.c_int(-100), path.encode(), ctypes.c_uint(0x8000 if recursive else 0),
                          ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)))
        if rc == 0:
            return
        if ctypes.get_errno() != 38:  # ENOSYS
            raise OSError(f"mount_setattr {path}: {os.strerror(ctypes.get_errno())}")
        points = [path]
        if recursive:
            points = []
            with open("/proc/self/mountinfo") as f:
                for line in f:
                    point = line.split()[4]
                    point = __import__("re").sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), point)
                    if point == path or point.startswith(path.rstrip("/") + "/"):
                        points.append(point)
        for point in points:
            flags = os.statvfs(point).f_flag
            keep_flags = (flags & (2 | 4 | 8 | 1024 | 2048)) | ((1 << 21) if flags & 4096 else 0)
            mount(None, point, None, bind | remount | keep_flags | (rdonly if on else 0))

    def bind_back(under):
        for path, (fd, writable) in keep.items():
            if path == under or path.startswith(under.rstrip("/") + "/"):
                os.makedirs(path, exist_ok=True)
                mount(f"/proc/self/fd/{fd}", path, None, bind | rec)
                if writable:
                    set_readonly(path, False, False)

    try:
        set_readonly("/", True, True)
        got["readonly_fs"] = True
    except OSError as exc:
        why["readonly_fs"] = str(exc)
    # A minimal /dev: the host's device nodes stay writable on a read-only mount (a raw disk, for
    # uid 0), so only these few are bound into a fresh one.
    devices = {}
    for name in ("null", "zero", "full", "random", "urandom"):
        try:
            devices[name] = os.open(f"/dev/{name}", os.O_PATH)
        except OSError:
            pass
    try:
        mount("tmpfs", "/dev", "tmpfs", nosuid, "size=64k,mode=755")
    except OSError as exc:
        got["readonly_fs"] = False
        why["readonly_fs"] = f"/dev: {exc}"
    else:
        for name, fd in devices.items():
            open(f"/dev/{name}", "w").close()
            mount(f"/proc/self/fd/{fd}", f"/dev/{name}", None, bind)
        for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                             ("stderr", "/proc/self/fd/2")):
            os.symlink(target, f"/dev/{name}")
        os.mkdir("/dev/shm")
        set_readonly("/dev", True, False)
    for fd in devices.values():
        os.close(fd)
    hidden = [p for p in config["hidden"] if os.path.lexists(p)]
    try:
        for path in hidden:
            if os.path.isdir(path):
                mount("tmpfs", path, "tmpfs", nosuid | nodev, "size=1m,mode=755")
                bind_back(path)
            else:
                mount("/dev/null", path, None, bind)
            set_readonly(path, True, False)
    except OSError as exc:
        got["readonly_fs"] = False
        why["readonly_fs"] = f"hiding {path}: {exc}"
    workdir = config["workdir"] if config["workdir"].startswith("/tmp/") else "/tmp/vf-sandbox/work"
    try:
        mount("tmpfs", "/tmp", "tmpfs", nosuid | nodev, f"size={config['disk_mb']}m,mode=1777")
    except OSError as exc:
        why["private_tmp"] = str(exc)
        workdir = None
    if workdir is not None:  # from here on a failure is the run's (init reports it, nothing runs isolated)
        bind_back("/tmp")
        os.makedirs(workdir, exist_ok=True)
        with open(os.path.join(workdir, os.path.basename(config["main"])), "w", encoding="utf-8") as f:
            f.write(config["source"])
        got["private_tmp"] = True
    covered = hidden + (["/tmp"] if workdir is not None else [])
    for path, (fd, writable) in keep.items():
        if writable and not any(path == c or path.startswith(c.rstrip("/") + "/") for c in covered):
            mount(f"/proc/self/fd/{fd}", path, None, bind | rec)
            set_readonly(path, False, False)
    return workdir


def _vf_enter_namespaces(config, got, why):
    # Returns True in the isolated process that runs the code, False (in this process) when
    # namespaces are unavailable. Three processes when it works:
    #   this one (outside; waits, then exits with the code's status, signal included),
    #   an init (pid 1 of the new PID namespace; makes the mounts, reaps, and on its exit the
    #   kernel kills everything left in the namespace),
    #   the runner (pid 2), which returns True here.
    import ctypes
    import os
    import signal
    import sys

    libc = ctypes.CDLL(None, use_errno=True)
    ulong = ctypes.c_ulong
    newns, newipc, newpid, newnet, newuser = 0x00020000, 0x08000000, 0x20000000, 0x40000000, 0x10000000
    flags = newns | newipc | newpid | (0 if config["network"] else newnet)
    uid, gid = os.getuid(), os.getgid()
    if os.geteuid() != 0:
        flags |= newuser
    if libc.unshare(flags) != 0:
        why["namespaces"] = f"unshare: {os.strerror(ctypes.get_errno())}"
        return False
    if flags & newuser:
        config["own_userns"] = True
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
            why["namespaces"] = msg[2:]
            got.update(readonly_fs=False, private_tmp=False)
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
        rec, private, rdonly, nosuid, nodev, noexec = 16384, 1 << 18, 1, 2, 4, 8
        if libc.mount(b"none", b"/", None, ulong(rec | private), None) != 0:
            raise OSError(f"mount /: {os.strerror(ctypes.get_errno())}")
        # What stays visible under covered paths (opened in this mount namespace: bind mounts
        # cannot take a source from another one): the interpreter (read-only) and writable_paths.
        keep = {}
        needed = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                  os.path.dirname(os.path.realpath(sys.executable))}
        for path, writable in [(p, False) for p in sorted(needed)] + [(p, True) for p in config["writable"]]:
            path = os.path.realpath(path)
            if path in keep:
                keep[path] = (keep[path][0], keep[path][1] or writable)
                continue
            try:
                keep[path] = (os.open(path, os.O_PATH), writable)
            except OSError:
                pass
        workdir = _vf_filesystem(libc, config, got, why, keep)
        for src, dst, fstype, mflags, data in (
            (b"proc", b"/proc", b"proc", rdonly | nosuid | nodev | noexec, None),
            (b"tmpfs", b"/dev/shm", b"tmpfs", nosuid | nodev, b"size=64m,mode=1777"),
        ):
            if libc.mount(src, dst, fstype, ulong(mflags), data) != 0:
                raise OSError(f"mount {dst.decode()}: {os.strerror(ctypes.get_errno())}")
        for fd, _ in keep.values():
            os.close(fd)
        os.chdir("/")
    except BaseException as exc:
        os.write(w, f"E:{exc}".encode())
        os._exit(0)
    os.write(w, b"R")
    runner = os.fork()
    if runner == 0:
        os.close(w)
        if workdir is not None:
            os.chdir(workdir)
            config["main"] = os.path.join(workdir, os.path.basename(config["main"]))
            os.environ["HOME"] = os.environ["TMPDIR"] = workdir
        else:  # no private /tmp: the host's work directory, read-only if the rest is
            os.chdir(config["workdir"])
        got["namespaces"] = True
        return True
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            os._exit(1)
        if pid == runner:
            if workdir is not None:
                try:  # the private /tmp is full (or nearly): say so, the code may have hidden it
                    st = os.statvfs("/tmp")
                    if st.f_bavail * st.f_frsize < 64 * 1024:
                        _vf_status("disk_full")
                except OSError:
                    pass
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
    # RLIMIT_NPROC counts the processes of this user in its user namespace: only the run's own
    # when it made one (not root, isolated; +2 for the waiting process and init), every process
    # of the user otherwise (so only when asked for explicitly). Never binding on real root.
    if config["nproc"] is not None and config.get("own_userns"):
        setlimit(resource.RLIMIT_NPROC, config["nproc"] + 2)
    elif config["nproc"] is not None and config["nproc_explicit"]:
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

    global _VF_STATUS
    config = json.loads(sys.argv[1])
    # Opened now: once the run has its own /tmp, these paths may no longer be reachable.
    _VF_STATUS = os.open(config["status"], os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
    config["isolation_fd"] = os.open(config["isolation_file"], os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)
    with open(config["main"], encoding="utf-8") as f:
        config["source"] = source = f.read()
    got = {"namespaces": False, "readonly_fs": False, "private_tmp": False, "cgroup": False}
    why = {}
    got["cgroup"] = _vf_join_cgroup(config, why)
    isolated = False
    if config["isolation"] == "off":
        why.update({k: "isolation='off'" for k in ("namespaces", "readonly_fs", "private_tmp")})
    else:
        isolated = _vf_enter_namespaces(config, got, why)
    for key in ("readonly_fs", "private_tmp"):
        if not got[key]:
            why.setdefault(key, "needs the run's own mount namespace")
    _vf_report(config, got, why)
    if config["isolation"] == "require" and not all(got.values()):
        sys.exit(125)
    if not config["network"] and not isolated:
        _vf_isolate_network()
    _vf_limit(config)
    if isolated:
        _vf_drop_privileges()
    if not config["network"]:
        _vf_block_network()
    path = config["main"]
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
            _vf_status("memory_error")
        elif isinstance(exc, OSError) and exc.errno in (28, 122):  # ENOSPC, EDQUOT
            _vf_status("disk_full")
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


class _Cgroup:
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


def _make_cgroup(limits: SandboxLimits) -> tuple[_Cgroup | None, str]:
    """A fresh cgroup with the run's totals, or None and why not."""
    setting = os.environ.get(CGROUP_ENV, "auto").strip() or "auto"
    if setting == "off":
        return None, f"{CGROUP_ENV}=off"
    if sys.platform != "linux":
        return None, "not Linux"
    name = f"vf-sandbox-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    memory = limits.memory_mb * 1024 * 1024
    pids = "max" if limits.max_processes is None else str(limits.max_processes + 2)  # + waiting process, init
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
            _write(d / "memory.max", str(memory))
            if (d / "memory.swap.max").exists():
                _write(d / "memory.swap.max", "0")
            _write(d / "pids.max", pids)
            return _Cgroup([d], 2), ""
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
        _write(made[0] / "memory.limit_in_bytes", str(memory))
        if (made[0] / "memory.memsw.limit_in_bytes").exists():
            _write(made[0] / "memory.memsw.limit_in_bytes", str(memory))
        _write(made[1] / "pids.max", pids)
        return _Cgroup(made, 1), ""
    except OSError as exc:
        for d in made:
            with contextlib.suppress(OSError):
                d.rmdir()
        reasons.append(f"cgroup v1: {exc.strerror or exc}")
        return None, "; ".join(reasons)


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
    cgroup, cgroup_reason = _make_cgroup(limits)
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
    code: str, limits: SandboxLimits, stdin: str | None, cgroup: _Cgroup | None, cgroup_reason: str
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
        flags: set[str] = set()
        with contextlib.suppress(OSError), open(status, encoding="utf-8", errors="replace") as f:
            flags = set(f.read(4096).split())
        report: dict[str, dict[str, object]] = {}
        with contextlib.suppress(OSError, ValueError):
            report = json.loads(isolation_file.read_text())
    returncode = transport.get_returncode()
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
