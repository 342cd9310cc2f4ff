"""Attacks on the sandbox's filesystem line and totals, run one at a time by `test_sandbox_totals.py`.

Run as ``unshare --pid --fork --mount-proc python sandbox_fs_attacks.py ATTACK WORKDIR [ISOLATION]``:
every process the attack starts, escaped or not, is in the PID namespace the test made. WORKDIR is
a host directory the test made; the driver makes the caller's cwd (``WORKDIR/caller``) and
output directory (``WORKDIR/outputs``) in it. Prints one JSON object (the run's result and what
the driver saw on the host) as its last line. ``VF_SANDBOX_CGROUP`` is passed through.
"""

from __future__ import annotations

import json
import os
import sys
import sysconfig
from pathlib import Path

from verifiers.tools.sandbox import SandboxLimits, run_python_sync

MARK = f"vf_sandbox_attack_{os.getpid()}_{os.urandom(4).hex()}"


def run(code: str, **limits: object) -> dict:
    limits = {"isolation": sys.argv[3] if len(sys.argv) > 3 else "auto", "wall_time_s": 20, "cpu_time_s": 20,
              **limits}
    result = run_python_sync(code, SandboxLimits(**limits))  # type: ignore[arg-type]
    out = result.model_dump()
    out["stderr"] = out["stderr"][-3000:]
    out["tool_output"] = result.to_tool_output()[-500:]
    return out


def venv(workdir: Path) -> dict:
    """Plant a start-up hook (.pth) in the caller's site-packages; write into the caller's cwd."""
    purelib = Path(sysconfig.get_paths()["purelib"])
    hook = purelib / f"{MARK}.pth"
    notes = Path.cwd() / "notes.txt"
    code = (
        "import os\n"
        f"for path, mode in (({str(hook)!r}, 'w'), ({str(notes)!r}, 'a'), ({str(Path.cwd() / 'planted.txt')!r}, 'w')):\n"
        "    try:\n"
        "        with open(path, mode) as f:\n"
        "            f.write('# vf sandbox test marker\\n')\n"
        "        print('wrote', path)\n"
        "    except OSError as e:\n"
        "        print('refused', e.errno, path)\n"
    )
    out = {"run": run(code), "hook_planted": hook.exists()}
    if hook.exists():  # a failing sandbox must not leave it there (a comment line: harmless meanwhile)
        hook.unlink()
    out["notes_after"] = notes.read_text()
    out["planted_in_cwd"] = (Path.cwd() / "planted.txt").exists()
    return out


def hidden(workdir: Path) -> dict:
    """Read the caller's cwd and its output directory (named in hidden_paths)."""
    outputs = workdir / "outputs"
    code = (
        "import os\n"
        f"for d in ({str(Path.cwd())!r}, {str(outputs)!r}):\n"
        "    print('list', d, sorted(os.listdir(d)))\n"
        f"for p in ({str(Path.cwd() / 'notes.txt')!r}, {str(outputs / 'results.jsonl')!r}):\n"
        "    try:\n        print('read', p, open(p).read().strip())\n"
        "    except OSError as e:\n        print('refused', e.errno, p)\n"
        "    try:\n        open(p, 'a').write('tampered')\n        print('wrote', p)\n"
        "    except OSError as e:\n        print('refused-write', e.errno, p)\n"
    )
    out = {"run": run(code, hidden_paths=[str(outputs)])}
    out["results_after"] = (outputs / "results.jsonl").read_text()
    return out


def devices(workdir: Path) -> dict:
    """The host's device nodes (a raw disk is writable by uid 0 on a read-only mount): only looked at."""
    code = "import os\nprint(sorted(os.listdir('/dev')))\n"
    return {"run": run(code)}


def fill(workdir: Path) -> dict:
    """Fill the work directory and /tmp (files under the per-file limit); write onto the host disk."""
    host = workdir / "host_fill"
    code = (
        "import os\nwritten = 0\nchunk = b'x' * (1 << 20)\n"
        f"try:\n    open({str(host)!r}, 'wb').write(chunk)\n    print('host write ok')\n"
        "except OSError as e:\n    print('host write refused', e.errno)\n"
        "try:\n"
        "    for i in range(16):\n"
        "        with open(('/tmp/f%d' if i % 2 else 'f%d') % i, 'wb') as f:\n"
        "            for _ in range(2):\n"
        "                f.write(chunk)\n                f.flush()\n                written += len(chunk)\n"
        "finally:\n    print('written', written, flush=True)\n"
    )
    out = {"run": run(code, disk_mb=8, max_file_size_mb=4, writable_paths=[]), "host_file": host.exists()}
    if host.exists():
        host.unlink()
    return out


def forkbomb(workdir: Path, **limits: object) -> dict:
    """Doubling fork bomb, bounded at 7 rounds (128 processes) so that a failing sandbox stays harmless."""
    code = (
        "import os, sys, time\nfailed = 0\n"
        "for _ in range(7):\n"
        "    try:\n        os.fork()\n"
        "    except OSError:\n        failed += 1\n"
        "print('p' if not failed else 'e', flush=True)\n"
        "time.sleep(1.5)\n"
    )
    return {"run": run(code, **(limits or {"max_processes": 16}))}


def forkbomb_default_limits(workdir: Path) -> dict:
    """The same under the default limits (max_processes=64)."""
    return forkbomb(workdir, wall_time_s=20)


def memhog(workdir: Path) -> dict:
    """Five children of 48 MB each, held together, against a 160 MB limit (each alone fits RLIMIT_AS)."""
    code = (
        "import os, sys, time\npids = []\n"
        "for i in range(5):\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        buf = bytearray(b'x') * (48 << 20)\n"
        "        print('held', i, flush=True)\n"
        "        time.sleep(1.5)\n"
        "        print('done', i, len(buf), flush=True)\n"
        "        os._exit(0)\n"
        "    pids.append(pid)\n"
        "for pid in pids:\n    os.waitpid(pid, 0)\n"
        "print('parent done', flush=True)\n"
    )
    return {"run": run(code, memory_mb=160)}


def report(workdir: Path) -> dict:
    """What the code can observe of each protection, next to what the result says it had."""
    cwd = str(Path.cwd())
    code = (
        "import json, os\n"
        "st = open('/proc/self/status').read()\n"
        "root, tmp, cwd = os.statvfs('/'), os.statvfs('/tmp'), os.statvfs('.')\n"
        "print(json.dumps({\n"
        "    'namespaces': os.getpid() == 2 and 'CapEff:\\t0000000000000000' in st,\n"
        f"    'readonly_fs': bool(root.f_flag & os.ST_RDONLY) and os.listdir({cwd!r}) == [],\n"
        "    'private_tmp': tmp.f_blocks * tmp.f_frsize == 8 << 20 and tmp.f_fsid == cwd.f_fsid,\n"
        "    'cgroup': 'vf-sandbox-' in open('/proc/self/cgroup').read(),\n"
        "}))\n"
    )
    return {"run": run(code, disk_mb=8)}


def require(workdir: Path) -> dict:
    """isolation='require' must refuse (not run the code) when a protection is unavailable."""
    marker = workdir / "ran"
    try:
        out = {"run": run(f"open({str(marker)!r}, 'w').write('x')\n", isolation="require",
                          writable_paths=[str(workdir)]), "error": None}
    except Exception as exc:  # the refusal
        out = {"run": None, "error": f"{type(exc).__name__}: {exc}"}
    out["code_ran"] = marker.exists()
    return out


ATTACKS = {f.__name__: f for f in (venv, hidden, devices, fill, forkbomb, forkbomb_default_limits, memhog, report, require)}

if __name__ == "__main__":
    attack, workdir = sys.argv[1], Path(sys.argv[2])
    caller = workdir / "caller"
    (workdir / "outputs").mkdir(parents=True, exist_ok=True)
    (workdir / "outputs" / "results.jsonl").write_text('{"reward": 1.0}\n')
    caller.mkdir(exist_ok=True)
    (caller / "notes.txt").write_text("caller data\n")
    os.chdir(caller)
    out = ATTACKS[attack](workdir)
    out["driver"] = {"uid": os.getuid(), "verifiers": sys.modules["verifiers"].__file__}
    print(json.dumps(out), flush=True)
