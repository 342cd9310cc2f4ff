"""The name `verifiers` is also an unrelated project's on PyPI: the hub must serve ours.

vf-build publishes this verifiers next to the environments, its version cannot exist on
PyPI (a local label), vf-install pins it when other indexes are searched, and its hint for
a missing verifiers no longer sends users to PyPI.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote

from packaging.version import Version

import verifiers
from verifiers.cli.build import main as vf_build
from verifiers.hub.install import InstallTarget, _pip_hint, verifiers_pin


def test_vf_build_publishes_this_verifiers_and_pip_resolves_it_from_the_hub(tmp_path: Path, built_hub) -> None:
    package = Path(shutil.copytree(built_hub.package_dir, tmp_path / "src" / built_hub.package_dir.name))
    hub = tmp_path / "hub"
    assert vf_build([str(package), "--out", str(hub)]) == 0
    version = verifiers.__version__
    assert Version(version).local == "vf"  # PyPI refuses local labels: no upstream release can equal it
    wheel = hub / "files" / f"verifiers-{version}-py3-none-any.whl"
    assert wheel.is_file() and (hub / "simple" / "verifiers" / "index.html").is_file()

    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-deps", "--quiet",
         "--index-url", (hub / "simple").as_uri(), "--report", str(report), f"verifiers=={version}"],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    [item] = json.loads(report.read_text())["install"]
    assert item["metadata"]["version"] == version
    assert unquote(item["download_info"]["url"]) == wheel.as_uri().replace("%2B", "+")


def test_pin_is_the_installed_verifiers_else_this_one(tmp_path: Path, venv_python: Path) -> None:
    seen = subprocess.run([str(venv_python), "-c", "import importlib.metadata as m; print(m.version('verifiers'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert verifiers_pin(str(venv_python)) == f"verifiers=={seen}"
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    assert verifiers_pin(str(bare / "bin" / "python")) == f"verifiers=={verifiers.__version__}"


def test_missing_verifiers_hint_points_at_vf_build_not_pypi() -> None:
    target = InstallTarget(kind="index", spec="my-env", requirement="my-env", project="my-env",
                           index_url="http://h/simple")
    output = "ERROR: Could not find a version that satisfies the requirement verifiers\n" \
             "ERROR: No matching distribution found for verifiers\n"
    hint = _pip_hint(target, output)
    assert "vf-build" in hint and "pypi.org" not in hint and "different project" in hint
