"""Run an arbitrary program (an argv, not Python code) in the sandbox's namespaces.

`EXEC_BOOTSTRAP` is started as ``python -I -c EXEC_BOOTSTRAP <config json>``. It reuses the
sandbox's isolation code (`sandbox_child.ISOLATION`): PID, mount, IPC and an empty network
namespace, a read-only host with a private ``/tmp``, no capabilities, the seccomp deny-list.
Then it ``exec``s the program. The program's only way out of its network namespace is a relay
that the namespace's init runs: it listens on ``127.0.0.1:<port>`` inside the namespace and
forwards each connection to a Unix socket on the host's filesystem (the interception
gateway's), which network namespaces do not separate.

Config keys: ``argv``, ``workdir`` (the program's cwd, bound back read-write), ``writable``,
``hidden``, ``disk_mb`` (the private ``/tmp``), ``network`` (false), ``isolation_file`` (the
report, JSON ``{"isolation": {...}, "reasons": {...}}``, written before the program starts),
``relay`` (``{"port": int, "socket": path}``). When any protection is missing the program is
not run and the bootstrap exits with `REFUSED`; the caller reads the report and decides.
"""

from __future__ import annotations

from verifiers.tools.sandbox_child import ISOLATION

__all__ = ["EXEC_BOOTSTRAP", "REFUSED"]

REFUSED = 125
"""Exit status of the bootstrap when the isolation is incomplete and the program did not run."""

EXEC_BOOTSTRAP = ISOLATION + r"""

def _vf_relay_pipe(src, dst):
    import socket

    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def _vf_relay_serve(listener, target):
    # One connection in, one connection to the Unix socket out, bytes copied both ways.
    import socket
    import threading

    def serve(conn):
        with conn, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as up:
            try:
                up.connect(target)
            except OSError:
                return
            back = threading.Thread(target=_vf_relay_pipe, args=(up, conn), daemon=True)
            back.start()
            _vf_relay_pipe(conn, up)
            back.join()

    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


def _vf_relay_setup(config):
    # In init (pid 1), inside the new network namespace: loopback up, the listener bound before
    # the runner forks (so the program never races it), the accept thread started after the fork.
    import fcntl
    import socket
    import struct
    import threading

    relay = config["relay"]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifreq = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(s, 0x8913, ifreq)[:18])[1]  # SIOCGIFFLAGS
        fcntl.ioctl(s, 0x8914, struct.pack("16sH14x", b"lo", flags | 0x1 | 0x40))  # SIOCSIFFLAGS: UP, RUNNING
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("127.0.0.1", relay["port"]))
    except OSError as exc:
        raise OSError(f"relay: bind 127.0.0.1:{relay['port']}: {exc.strerror}") from None
    listener.listen(128)
    # The socket's directory was opened before the mounts (the private /tmp may hide its path):
    # connecting through the fd's /proc link reaches it from any mount namespace.
    target = f"/proc/self/fd/{relay['dir_fd']}/{relay['name']}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(target)
        except OSError as exc:
            raise OSError(f"relay: cannot reach {relay['socket']}: {exc.strerror}") from None

    def start():
        threading.Thread(target=_vf_relay_serve, args=(listener, target), daemon=True).start()

    return start


def _vf_exec_main():
    import json
    import os

    config = json.loads(sys.argv[1])
    config["isolation_fd"] = os.open(config["isolation_file"], os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)
    relay = config["relay"]
    relay["name"] = os.path.basename(relay["socket"])
    got = {"namespaces": False, "readonly_fs": False, "private_tmp": False}
    why = {}
    try:
        relay["dir_fd"] = os.open(os.path.dirname(relay["socket"]), os.O_PATH | os.O_CLOEXEC)
    except OSError as exc:
        why["namespaces"] = f"relay: cannot open the directory of {relay['socket']}: {exc.strerror}"
        isolated = False
    else:
        isolated = _vf_enter_namespaces(config, got, why, _vf_relay_setup)
    if isolated:
        try:
            _vf_drop_privileges()
        except OSError as exc:
            got["namespaces"] = False
            why["namespaces"] = str(exc)
    for key in ("readonly_fs", "private_tmp"):
        if not got[key]:
            why.setdefault(key, "needs the run's own mount namespace")
    _vf_report(config, got, why)
    if not all(got.values()):
        sys.exit(""" + str(REFUSED) + r""")
    argv = config["argv"]
    try:
        os.execvpe(argv[0], argv, os.environ)
    except OSError as exc:
        why = ""
        if exc.errno == 13:  # EACCES: name what keeps the program out (no capabilities here, even for root)
            found = argv[0]
            if "/" not in found:
                dirs = os.environ.get("PATH", os.defpath).split(os.pathsep)
                found = next((os.path.join(d, found) for d in dirs if os.path.exists(os.path.join(d, found))), found)
            closed = _vf_closed_to_us(found) or _vf_closed_to_us(os.path.realpath(found))
            if closed:
                why = (f" ({closed}; make it readable and enterable, chmod o+rx, or keep the program and its "
                       "interpreter outside other users' private directories)")
        sys.stderr.write(f"vf-sandbox: cannot execute {argv[0]!r}: {exc.strerror}{why}\n")
        os._exit(127)


_vf_exec_main()
"""
