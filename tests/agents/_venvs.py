"""Virtualenvs for real agent programs from PyPI: built by the tests, cached, never ours.

An agent program's packages (openai-agents, smolagents, an MCP server) are the program's
dependencies, not this project's: each program gets its own virtualenv, built with
``python -m venv`` and ``pip install -r <requirements file>`` from the package index pip is
configured for. The venv lives under ``$VF_TEST_AGENTS_DIR`` (default
``~/.cache/vf-test-agents``) in a folder named after the requirements file and a hash of its
text, the Python version and the platform, so a local rerun reuses it and an edited
requirements file gets a fresh one. A build is marked complete only when pip succeeded; a
half-built folder (an interrupted run) is built again. Concurrent test sessions wait on a lock
file instead of building the same venv twice.

If pip fails, the test fails with pip's output, unless the index cannot be reached at all:
then the test is skipped with a message naming the index (a machine without network cannot
run these tests; any other failure is a real one).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

CACHE_VAR = "VF_TEST_AGENTS_DIR"
INSTALL_TIMEOUT_S = 600
_MARKER = "vf-complete.json"


def cache_root() -> Path:
    """Where agent venvs are kept: ``$VF_TEST_AGENTS_DIR`` or ``~/.cache/vf-test-agents``."""
    configured = os.environ.get(CACHE_VAR)
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "vf-test-agents"


def venv_key(requirements: Path) -> str:
    """A hash of what decides the venv's contents: the requirements text, Python, platform."""
    digest = hashlib.sha256()
    for part in (requirements.read_bytes(), sys.version.encode(), platform.platform().encode(),
                 platform.machine().encode()):
        digest.update(part + b"\0")
    return digest.hexdigest()[:16]


def venv_dir(requirements: Path) -> Path:
    name = requirements.stem.removeprefix("requirements-")
    return cache_root() / f"{name}-{venv_key(requirements)}"


def _python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _is_complete(venv: Path) -> bool:
    """A finished build whose interpreter still runs (the base Python may have moved)."""
    if not (venv / _MARKER).is_file():
        return False
    try:
        subprocess.run([str(_python(venv)), "-c", "pass"], check=True, capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return False
    return True


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def index_url() -> str:
    """The index pip installs from: ``PIP_INDEX_URL``, pip's configuration, else PyPI."""
    if os.environ.get("PIP_INDEX_URL"):
        return os.environ["PIP_INDEX_URL"]
    try:
        out = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.index-url"],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        out = None
    if out is not None and out.returncode == 0 and out.stdout.strip():
        return out.stdout.strip()
    return "https://pypi.org/simple"


def index_unreachable(url: str) -> str | None:
    """Why the index cannot be reached (None when it answers)."""
    probe = url.rstrip("/") + "/pip/"
    try:
        with urllib.request.urlopen(probe, timeout=20) as resp:
            resp.read(1)
    except urllib.error.HTTPError:
        return None  # it answered: the network is there
    except (urllib.error.URLError, OSError) as exc:
        return f"{probe}: {getattr(exc, 'reason', exc)}"
    return None


def _build(requirements: Path, venv: Path) -> float:
    """Build ``venv`` from scratch; returns the seconds it took. Fails or skips the test on error."""
    shutil.rmtree(venv, ignore_errors=True)
    start = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
    log = venv / "pip-install.log"
    cmd = [str(_python(venv)), "-m", "pip", "install", "--no-input", "--disable-pip-version-check",
           "-r", str(requirements)]
    with log.open("w") as out:
        try:
            proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=INSTALL_TIMEOUT_S)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            code = None
    if code == 0:
        seconds = time.monotonic() - start
        (venv / _MARKER).write_text(json.dumps({"requirements": str(requirements), "build_s": round(seconds, 1)}))
        return seconds
    tail = log.read_text(errors="replace")[-3000:]
    url = index_url()
    reason = index_unreachable(url)
    shutil.rmtree(venv, ignore_errors=True)
    if reason is not None:
        pytest.skip(f"the package index is unreachable ({reason}); the agent tests install "
                    f"{requirements.name} from it (set PIP_INDEX_URL to a reachable mirror)")
    what = "timed out" if code is None else f"exited with code {code}"
    pytest.fail(f"pip install -r {requirements} {what} although the index {url} answers; pip said:\n{tail}",
                pytrace=False)
    raise AssertionError("unreachable")  # pytest.fail raises


def agent_python(requirements: Path) -> Path:
    """The interpreter of the venv for ``requirements``, built on first use and then reused."""
    venv = venv_dir(requirements)
    with _lock(venv.with_name(venv.name + ".lock")):
        if not _is_complete(venv):
            _build(requirements, venv)
    return _python(venv)


def build_seconds(python: Path) -> float | None:
    """How long the venv behind ``python`` took to build (from its marker)."""
    marker = python.parent.parent / _MARKER
    try:
        return float(json.loads(marker.read_text())["build_s"])
    except (OSError, ValueError, KeyError):
        return None
