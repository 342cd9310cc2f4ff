"""The code a sandboxed run executes first, inside the child, before the user's code.

`verifiers.tools.sandbox` starts the child as ``python -c BOOTSTRAP``. It enters the
namespaces, sets up the read-only filesystem and private ``/tmp``, joins the run's cgroup,
drops privileges, applies the rlimits and the network audit hook, then runs the user's code.
Kept as text (not imported) because it runs in a fresh interpreter with nothing but the
standard library. ``ISOLATION``, its first part (namespaces, filesystem, cgroup, privileges),
is shared with `verifiers.tools.sandbox_exec`, which runs an arbitrary program instead.
"""

# The namespaces, filesystem, cgroup and privilege code shared with `sandbox_exec` (which runs
# an arbitrary program instead of Python code). It must not rely on anything outside the
# standard library.
ISOLATION = r"""
import sys


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


def _vf_closed_parents(paths):
    # The topmost directory on the way to each path that root may not enter by its mode bits alone
    # (another user's home, 0750 on Ubuntu; a 0700 directory): the run drops every capability, so
    # uid 0 gets no more than those bits allow. Only root: a user's own user namespace changes nothing.
    # `paths` is the dict of what stays visible (path -> (fd, writable)).
    import os

    if os.geteuid() != 0:
        return []
    groups = set(os.getgroups()) | {os.getegid()}
    out = []
    for path in paths:
        parts = [p for p in path.split("/") if p][:-1]
        for i in range(1, len(parts) + 1):
            parent = "/" + "/".join(parts[:i])
            try:
                st = os.stat(parent)
            except OSError:
                break
            shift = 6 if st.st_uid == 0 else 3 if st.st_gid in groups else 0
            if not (st.st_mode >> shift) & 1:
                # One that must stay visible itself is left as it is (uncovered, it stays closed): a cover
                # would hide it, and binding it back recursively would bring the cover along.
                if parent not in out and parent not in paths:
                    out.append(parent)
                break
    return out


def _vf_closed_to_us(path):
    # Why `path` is out of this process's reach (checked after the capabilities are gone, so uid 0
    # gets what the mode bits give it): the directory it cannot enter or the path it cannot read,
    # with its mode and owner. None when it is reachable, or absent.
    import os

    parts = [p for p in os.path.abspath(path).split("/") if p]
    for i in range(1, len(parts) + 1):
        step = "/" + "/".join(parts[:i])
        try:
            st = os.stat(step)
        except FileNotFoundError:
            return None
        except OSError as exc:
            return f"{step}: {exc.strerror}"
        last = i == len(parts)
        need = os.X_OK if not last else os.R_OK | (os.X_OK if os.path.isdir(step) else 0)
        if not os.access(step, need):
            return (f"{step} (mode {st.st_mode & 0o7777:04o}, owner uid {st.st_uid}, group {st.st_gid}) does not "
                    f"let uid {os.geteuid()} {'enter' if not last else 'read'} it without capabilities")
    return None


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
    # Closed parents of what stays visible (see _vf_closed_parents) are covered like hidden paths,
    # with what stays visible bound back: nothing else of them becomes readable. A hidden path
    # under one is covered with it.
    closed = config.get("closed_parents", [])
    hidden = closed + [p for p in config["hidden"] if os.path.lexists(p)
                       and not any(p == c or p.startswith(c + "/") for c in closed)]
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
    # Python code gets a work directory in the private /tmp; a program (`sandbox_exec`, no "source")
    # keeps its host work directory, bound back read-write from `keep`.
    workdir = config["workdir"]
    if "source" in config and not workdir.startswith("/tmp/"):
        workdir = "/tmp/vf-sandbox/work"
    try:
        mount("tmpfs", "/tmp", "tmpfs", nosuid | nodev, f"size={config['disk_mb']}m,mode=1777")
    except OSError as exc:
        why["private_tmp"] = str(exc)
        workdir = None
    if workdir is not None:  # from here on a failure is the run's (init reports it, nothing runs isolated)
        bind_back("/tmp")
        os.makedirs(workdir, exist_ok=True)
        if "source" in config:
            with open(os.path.join(workdir, os.path.basename(config["main"])), "w", encoding="utf-8") as f:
                f.write(config["source"])
        got["private_tmp"] = True
    covered = hidden + (["/tmp"] if workdir is not None else [])
    for path, (fd, writable) in keep.items():
        if writable and not any(path == c or path.startswith(c.rstrip("/") + "/") for c in covered):
            mount(f"/proc/self/fd/{fd}", path, None, bind | rec)
            set_readonly(path, False, False)
    return workdir


def _vf_enter_namespaces(config, got, why, init_hook=None):
    # Returns True in the isolated process that runs the code, False (in this process) when
    # namespaces are unavailable. `init_hook(config)`, if given, runs in init once the mounts are
    # made (an exception fails the isolation, with its message as the reason) and may return a
    # callable that init calls after forking the runner (to start threads: none exist at the fork).
    # Three processes when it works:
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
        # A SIGTERM to the process group reaches the code too, which may end cleanly (its status
        # then comes back here); only SIGKILL of this process ends the namespace at once.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        chunks = []
        while True:
            data = os.read(r, 256)
            if not data:
                break
            chunks.append(data)
        os.waitpid(init, 0)
        msg = b"".join(chunks).decode()
        if msg.startswith("E:"):
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # this process goes on, unisolated
            why["namespaces"] = msg[2:]
            got.update(readonly_fs=False, private_tmp=False)
            return False
        if "S:" not in msg:
            os._exit(1)
        status = int(msg.split("S:", 1)[1])
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            if sig not in (signal.SIGKILL, signal.SIGSTOP):  # these two have no handler to reset
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
        # cannot take a source from another one): the interpreter and ``readable`` (read-only), and
        # ``writable``.
        keep = {}
        needed = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                  os.path.dirname(os.path.realpath(sys.executable))}
        readable = [(p, False) for p in sorted(needed) + list(config.get("readable", []))]
        for path, writable in readable + [(p, True) for p in config["writable"]]:
            path = os.path.realpath(path)
            if path in keep:
                keep[path] = (keep[path][0], keep[path][1] or writable)
                continue
            try:
                keep[path] = (os.open(path, os.O_PATH), writable)
            except OSError:
                pass
        config["closed_parents"] = _vf_closed_parents(keep)
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
        after_fork = init_hook(config) if init_hook is not None else None
    except BaseException as exc:
        os.write(w, f"E:{exc}".encode())
        os._exit(0)
    os.write(w, b"R")
    runner = os.fork()
    if runner == 0:
        os.close(w)
        if workdir is not None:
            os.chdir(workdir)
            if "main" in config:
                config["main"] = os.path.join(workdir, os.path.basename(config["main"]))
            os.environ["HOME"] = os.environ["TMPDIR"] = workdir
        else:  # no private /tmp: the host's work directory, read-only if the rest is
            os.chdir(config["workdir"])
        got["namespaces"] = True
        return True
    if after_fork is not None:
        after_fork()
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


"""

# Runs inside the child (via `python -c`) before the user's code; its own frames are cut from
# tracebacks.
BOOTSTRAP = ISOLATION + r"""

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
    # The interpreter's own directories on sys.path (stdlib, lib-dynload, site-packages), checked
    # once the run has dropped its capabilities: without them root may be shut out of them.
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}
    installation = [p for p in sys.path if p and os.path.isdir(p)
                    and any((os.path.realpath(p) + "/").startswith(x.rstrip("/") + "/") for x in prefixes)]
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
        for path in installation:
            closed = _vf_closed_to_us(path)
            if closed:  # nothing of the code runs: the caller raises, naming it
                _vf_status(f"interpreter_closed {path}: {closed}")
                sys.exit(126)
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
