"""Fixtures for the hub tests: package folders, a built hub, a static file server, fresh virtualenvs.

Everything is real: wheels are built by pip, the hub is served by ``python -m
http.server`` on 127.0.0.1, and packages are installed by pip into new virtualenvs. To
keep that fast, a new virtualenv gets no pip and no dependencies of its own: a ``.pth``
file adds this project's site-packages (with verifiers, its dependencies and pip), so
pip sees them as installed and only the environment package itself is fetched.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from verifiers.hub.build import build_hub
from verifiers.hub.scaffold import scaffold_environment

REPO = Path(__file__).resolve().parents[2]
HUB_ENV = "hubtest-env"  # a name nothing else installs, so a hit can only come from our hub
HUB_MODULE = "hubtest_env"


@pytest.fixture(autouse=True)
def _hermetic_pip(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """pip sees only the indexes a test names: no config files, links or caches of this machine."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    monkeypatch.setenv("PIP_NO_INPUT", "1")
    monkeypatch.setenv("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    for var in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "VF_HUB_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("xdg")))


def set_version(package_dir: Path, version: str) -> None:
    pyproject = package_dir / "pyproject.toml"
    text = re.sub(r'(?m)^version = ".*"$', f'version = "{version}"', pyproject.read_text())
    pyproject.write_text(text)


def copy_bundled(name: str, dest: Path) -> Path:
    """A copy of a bundled environment package, without build leftovers."""
    ignore = shutil.ignore_patterns("build", "*.egg-info", "__pycache__", ".pytest_cache")
    return Path(shutil.copytree(REPO / "environments" / name, dest / name, ignore=ignore))


@dataclass
class Hub:
    dir: Path
    package_dir: Path
    """The scaffolded source of `HUB_ENV`, at its latest version (0.2.0)."""


@pytest.fixture(scope="session")
def built_hub(tmp_path_factory: pytest.TempPathFactory) -> Hub:
    """A hub holding `HUB_ENV` 0.1.0 and 0.2.0 (treat as read-only; copy it to change it)."""
    root = tmp_path_factory.mktemp("hub-src")
    result = scaffold_environment(HUB_ENV, root / "environments", kind="single")
    package = Path(result.package_dir)
    hub_dir = root / "hub"
    build_hub([package], hub_dir)
    set_version(package, "0.2.0")
    build_hub([package], hub_dir)
    return Hub(dir=hub_dir, package_dir=package)


@dataclass
class StaticServer:
    url: str
    log: Path

    def requests(self) -> list[str]:
        """Request lines seen so far, e.g. ``GET /simple/x/ HTTP/1.1``."""
        return re.findall(r'"([A-Z]+ \S+ HTTP/[\d.]+)"', self.log.read_text())


def _serve(directory: Path, log: Path) -> Iterator[StaticServer]:
    with log.open("w") as err:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-u",
                "-m",
                "http.server",
                "--bind",
                "127.0.0.1",
                "--directory",
                str(directory),
                "0",
            ],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()  # "Serving HTTP on 127.0.0.1 port 43123 (http://...) ..."
            match = re.search(r"port (\d+)", line)
            if match is None:
                raise RuntimeError(f"http.server did not start: {line!r}")
            yield StaticServer(url=f"http://127.0.0.1:{match.group(1)}", log=log)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="module")
def hub_server(built_hub: Hub, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StaticServer]:
    """`built_hub` served by ``python -m http.server`` on a free port of 127.0.0.1."""
    yield from _serve(built_hub.dir, tmp_path_factory.mktemp("http-log") / "server.log")


@pytest.fixture
def serve() -> Iterator[Callable[[Path, Path], StaticServer]]:
    """Factory for extra static servers, all stopped at teardown."""
    running: list[Iterator[StaticServer]] = []

    def start(directory: Path, log: Path) -> StaticServer:
        gen = _serve(directory, log)
        running.append(gen)
        return next(gen)

    yield start
    for gen in running:
        gen.close()


def make_venv(path: Path) -> Path:
    """A new virtualenv that sees this project's site-packages through a .pth file; returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    python = path / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    parents = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    lines = "".join(f"import site; site.addsitedir({p!r})\n" for p in parents)
    (Path(site) / "_vf_test_parent.pth").write_text(lines)
    return python


@pytest.fixture
def venv_python(tmp_path: Path) -> Path:
    """The python of a fresh virtualenv (see `make_venv`)."""
    return make_venv(tmp_path / "venv")


def run_python(python: Path, code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, cwd=cwd, check=False)


def wait_for(predicate: Callable[[], bool], timeout_s: float = 5.0) -> bool:
    """Poll ``predicate`` (the server's log is written by another process)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


class HubHelpers:
    """Plain helpers for the test modules (conftest modules are not importable by name)."""

    env_id = HUB_ENV
    module = HUB_MODULE
    set_version = staticmethod(set_version)
    copy_bundled = staticmethod(copy_bundled)
    make_venv = staticmethod(make_venv)
    run_python = staticmethod(run_python)
    wait_for = staticmethod(wait_for)


@pytest.fixture(scope="session")
def helpers() -> HubHelpers:
    return HubHelpers()
