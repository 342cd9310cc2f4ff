"""``vf-install NAME --index-url HUB`` installs the hub's package, whatever pip is configured with.

Before the fix pip's own configuration (``PIP_EXTRA_INDEX_URL``, a ``pip.conf`` named by
``PIP_CONFIG_FILE``) still applied: an index offering a higher version won (dependency
confusion) while vf-install reported an install from the hub. Real pip, real wheels, two
real PEP 503 indexes served over HTTP on 127.0.0.1.
"""

from __future__ import annotations

import base64
import hashlib
import re
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from verifiers.errors import ConfigError
from verifiers.hub.build import build_hub
from verifiers.hub.index import add_wheels
from verifiers.hub.install import install_environment
from verifiers.hub.scaffold import scaffold_environment

ENV = "sectest-env"


def _set_version(package: Path, version: str) -> None:
    pyproject = package / "pyproject.toml"
    pyproject.write_text(re.sub(r'(?m)^version = ".*"$', f'version = "{version}"', pyproject.read_text()))


def _serve(directory: Path) -> Iterator[str]:
    proc = subprocess.Popen([sys.executable, "-u", "-m", "http.server", "--bind", "127.0.0.1", "--directory",
                             str(directory), "0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        match = re.search(r"port (\d+)", proc.stdout.readline())
        assert match, "http.server did not start"
        yield f"http://127.0.0.1:{match.group(1)}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wheel(out: Path, name: str, version: str, files: dict[str, str]) -> Path:
    """A minimal valid wheel holding ``files`` (path -> text)."""
    module = name.replace("-", "_")
    info = f"{module}-{version}.dist-info"
    entries = {**files,
               f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
               f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = []
    for path, text in entries.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    record.append(f"{info}/RECORD,,")
    wheel = out / f"{module}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, text in entries.items():
            zf.writestr(path, text)
        zf.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return wheel


@pytest.fixture(scope="module")
def hubs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(hub index URL with ENV 0.1.0, other index URL with ENV 9.0.0)."""
    root = tmp_path_factory.mktemp("sec-hubs")
    package = Path(scaffold_environment(ENV, root / "environments", kind="single").package_dir)
    build_hub([package], root / "hub")
    _set_version(package, "9.0.0")
    build_hub([package], root / "other")
    wheels = root / "wheels"
    wheels.mkdir()
    add_wheels(root / "hub", [_wheel(wheels, "shadow-env", "0.1.0", {
        "shadow_env/__init__.py": "", "trainers/__init__.py": "", "shadow_env_hook.pth": "import os\n"})])
    add_wheels(root / "hub", [_wheel(wheels, "hooky-env", "0.1.0", {
        "hooky_env/__init__.py": "def main():\n    pass\n", "sitecustomize.py": "", "openai/__init__.py": "",
        "hooky_env-0.1.0.dist-info/entry_points.txt": "[console_scripts]\nvf-eval = hooky_env:main\n"})])
    # A project the hub offers only as an sdist (its page links a .tar.gz, no wheel).
    sdist_page = root / "hub" / "simple" / "sdist-only-env"
    sdist_page.mkdir(parents=True)
    (sdist_page / "sdist_only_env-0.1.0.tar.gz").write_bytes(b"not built: a wheels-only install never fetches it")
    (sdist_page / "index.html").write_text(
        '<html><body><a href="sdist_only_env-0.1.0.tar.gz">sdist_only_env-0.1.0.tar.gz</a></body></html>\n')
    hub, other = _serve(root / "hub"), _serve(root / "other")
    yield f"{next(hub)}/simple", f"{next(other)}/simple"
    hub.close()
    other.close()


@pytest.fixture
def venv_python(tmp_path: Path) -> Path:
    """A fresh virtualenv without pip that sees this interpreter's site-packages (pip included)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True)
    python = tmp_path / "venv" / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    parents = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    (Path(site) / "_vf_sec_parent.pth").write_text("".join(f"import site; site.addsitedir({p!r})\n" for p in parents))
    return python


def _version_in(python: Path, project: str) -> str:
    return subprocess.run([str(python), "-c", f"import importlib.metadata as m; print(m.version({project!r}))"],
                          capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.parametrize("how", ["PIP_EXTRA_INDEX_URL", "pip.conf"])
def test_ambient_pip_indexes_cannot_replace_the_hub_package(
    hubs: tuple[str, str], venv_python: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    hub, other = hubs
    for var in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "VF_HUB_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    if how == "PIP_EXTRA_INDEX_URL":
        monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
        monkeypatch.setenv("PIP_EXTRA_INDEX_URL", other)
    else:
        conf = tmp_path / "pip.conf"
        conf.write_text(f"[global]\nextra-index-url = {other}\n")
        monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    result = install_environment(ENV, index_url=hub, python=str(venv_python), verify=False,
                                 environments_dir=tmp_path / "none")
    assert _version_in(venv_python, ENV) == "0.1.0"
    assert result.sources[ENV].startswith(hub.removesuffix("/simple") + "/")
    assert not any("not from the hub" in w for w in result.warnings)


def _install_from_hub(name: str, hub: str, python: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    return install_environment(name, index_url=hub, python=str(python), verify=False,
                               environments_dir=tmp_path / "none")


def test_pth_files_and_shadowing_packages_are_reported(
    hubs: tuple[str, str], venv_python: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _install_from_hub("shadow-env", hubs[0], venv_python, tmp_path, monkeypatch)
    assert any(".pth" in w and "shadow_env_hook.pth" in w for w in result.warnings), result.warnings
    assert any("top-level 'trainers'" in w for w in result.warnings), result.warnings


def test_startup_hooks_shadowed_distributions_and_console_scripts_are_reported(
    hubs: tuple[str, str], venv_python: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _install_from_hub("hooky-env", hubs[0], venv_python, tmp_path, monkeypatch)
    text = "\n".join(result.warnings)
    assert "top-level 'sitecustomize' module, which Python imports at every start" in text, text
    assert "top-level 'openai' package that the installed distribution 'openai' also provides" in text, text
    assert "console script 'vf-eval', the name of a command of 'verifiers'" in text, text


def test_a_hub_install_takes_wheels_only_unless_allowed(
    hubs: tuple[str, str], venv_python: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Building an sdist runs its code, and a fresh venv's pip extracts links that escape the build dir."""
    with pytest.raises(ConfigError, match=r"takes only wheels from a hub.*--allow-sdist"):
        _install_from_hub("sdist-only-env", hubs[0], venv_python, tmp_path, monkeypatch)


@pytest.mark.parametrize("name", ["sitecustomize", "usercustomize", "conftest", "setup", "pytest"])
def test_vf_init_refuses_names_python_or_pytest_pick_up_on_their_own(name: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=f"module '{name}', which"):
        scaffold_environment(name, tmp_path, kind="single")
    assert not any(tmp_path.iterdir())
