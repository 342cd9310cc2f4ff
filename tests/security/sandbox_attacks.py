"""Attacks on `verifiers.tools.sandbox`, run by `test_sandbox_escape.py` inside a PID namespace it made.

Run as ``unshare --pid --fork --mount-proc python sandbox_attacks.py WORKDIR [ISOLATION]``: if the sandbox
fails, ``kill(-1)`` and escaped processes reach only this namespace, never the machine. Prints
one JSON object (each attack's observations) as its last line; printing it at all shows the
driver survived.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path

from verifiers.tools.sandbox import SandboxLimits, run_python_sync

# The work directory is shared read-write: attacks 4 and 5 need a host path the code can reach.
# "auto", not "require": these attacks need the namespaces, not a cgroup (the test checks them).
LIMITS = SandboxLimits(isolation=sys.argv[2] if len(sys.argv) > 2 else "auto", wall_time_s=20, cpu_time_s=20,
                       writable_paths=[sys.argv[1]])


def run(code: str) -> dict:
    result = run_python_sync(code, LIMITS)
    return {"stdout": result.stdout, "stderr": result.stderr[-2000:], "exit_code": result.exit_code,
            "isolated": result.isolated, "namespaces": result.isolation.namespaces}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def main(workdir: Path) -> dict:
    out: dict = {"driver_pid": os.getpid()}
    workdir.chmod(0o777)
    canary = subprocess.Popen(["sleep", "120"])

    # 1. signal everything it can see
    out["kill"] = run("import os, signal\n"
                      "for target in (-1, 1, os.getppid()):\n"
                      "    try:\n        os.kill(target, signal.SIGKILL)\n"
                      "    except OSError as e:\n        print(target, type(e).__name__)\n"
                      f"try:\n    os.kill({os.getpid()}, signal.SIGKILL)\nexcept OSError as e:\n    print('driver', type(e).__name__)\n")
    out["canary_alive_after_kill"] = alive(canary.pid)

    # 2. the caller's secrets through /proc
    secret = os.environ["VF_CALLER_SECRET"]  # set by the test when it started this driver
    out["proc"] = run("import os, glob\nfound = []\n"
                      "for path in glob.glob('/proc/*/environ') + glob.glob('/proc/*/cmdline'):\n"
                      "    try:\n        data = open(path, 'rb').read(1 << 20)\n"
                      "    except OSError:\n        continue\n"
                      f"    if {secret!r}.encode() in data:\n        found.append(path)\n"
                      "print(sorted(p for p in os.listdir('/proc') if p.isdigit()), found)\n")

    # 3. back into the caller's network namespace, then connect with raw libc calls (no audit hook)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    out["setns"] = run(
        "import ctypes, glob, os, socket, struct\nlibc = ctypes.CDLL(None, use_errno=True)\nres = []\n"
        "for path in glob.glob('/proc/*/ns/net') + glob.glob('/proc/*/task/*/ns/net'):\n"
        "    try:\n        fd = os.open(path, os.O_RDONLY)\n    except OSError as e:\n"
        "        res.append((path, 'open', e.errno)); continue\n"
        "    rc = libc.setns(fd, 0)\n    res.append((path, rc, ctypes.get_errno()))\n"
        "s = libc.socket(socket.AF_INET, socket.SOCK_STREAM, 0)\n"
        f"addr = struct.pack('!HH4s8x', socket.AF_INET, {port}, socket.inet_aton('127.0.0.1'))\n"
        "addr = struct.pack('=H', socket.AF_INET) + addr[2:]\n"
        "rc = libc.connect(s, ctypes.c_char_p(addr), len(addr))\n"
        "print(res, rc, ctypes.get_errno())\n")
    try:
        server.accept()
        out["tcp_accepted"] = True
    except (TimeoutError, OSError):
        out["tcp_accepted"] = False
    server.close()

    # 4. a Unix socket anyone may connect to
    path = str(workdir / "open.sock")
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(path)
    os.chmod(path, 0o777)
    unix.listen(8)
    unix.settimeout(0.2)
    out["unix"] = run("import socket\ntry:\n"
                      f"    socket.socket(socket.AF_UNIX).connect({path!r})\n    print('connected')\n"
                      "except OSError as e:\n    print(type(e).__name__, e.errno)\n")
    try:
        unix.accept()
        out["unix_accepted"] = True
    except (TimeoutError, OSError):
        out["unix_accepted"] = False
    unix.close()

    # 5. a child that leaves the process group and keeps writing
    beat = workdir / "heartbeat"
    beat.touch()
    beat.chmod(0o666)
    out["setsid"] = run("import os, time\n"
                        "if os.fork() == 0:\n    os.setsid()\n"
                        "    if os.fork() == 0:\n"
                        "        while True:\n"
                        f"            open({str(beat)!r}, 'a').write('x'); time.sleep(0.05)\n"
                        "    os._exit(0)\n"
                        "time.sleep(0.3)\nprint('parent done')\n")
    time.sleep(0.3)
    size = beat.stat().st_size
    time.sleep(0.5)
    out["heartbeats_during"] = size
    out["heartbeats_after"] = beat.stat().st_size - size

    # 6. shared memory that would outlive the run
    key = random.randrange(1 << 20, 1 << 30)
    token = f"vf-leak-{key}"
    out["shm"] = run("import ctypes, os\n"
                     f"open('/dev/shm/{token}', 'w').write('x' * 100)\n"
                     "libc = ctypes.CDLL(None, use_errno=True)\n"
                     f"print(libc.shmget({key}, 4096, 0o1000 | 0o666))\n")
    out["shm_file_left"] = os.path.exists(f"/dev/shm/{token}")
    libc = ctypes.CDLL(None, use_errno=True)
    segment = libc.shmget(key, 0, 0)
    out["sysv_segment_left"] = segment != -1
    # a failing sandbox must not leave its litter on the machine either
    if segment != -1:
        libc.shmctl(segment, 0, None)  # IPC_RMID
    with contextlib.suppress(OSError):
        os.unlink(f"/dev/shm/{token}")

    # 7. capabilities and identity
    out["caps"] = run("import re\nst = open('/proc/self/status').read()\n"
                      "print({k: re.search(k + r':\\s*(\\S+)', st).group(1) for k in ('CapEff', 'CapPrm', 'CapBnd', 'NoNewPrivs', 'Seccomp')})\n")
    out["canary_alive_at_end"] = alive(canary.pid)
    canary.kill()
    return out


if __name__ == "__main__":
    result = main(Path(sys.argv[1]))
    print(json.dumps(result), flush=True)
