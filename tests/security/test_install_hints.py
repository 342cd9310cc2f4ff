"""Install hints name the command that works for how verifiers was installed, never PyPI's verifiers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from verifiers.install_hint import install_command

ROOT = Path(__file__).resolve().parents[2]


def test_from_a_clone_the_hint_is_an_editable_install_of_that_clone(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    monkeypatch.chdir(ROOT)
    assert install_command("train") == 'pip install -e ".[train]"'
    monkeypatch.chdir(tmp_path)
    assert install_command("mcp") == f'pip install -e "{ROOT}[mcp]"'


def test_from_an_installed_wheel_the_hint_is_the_hub_with_the_pinned_version(tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(ROOT)], check=True, capture_output=True, timeout=600)
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import verifiers.install_hint as h; "
            "print(h.__file__); print(h.install_command('ray'))")
    out = subprocess.run([sys.executable, "-c", code, str(target)], capture_output=True, text=True, check=True,
                         cwd=tmp_path).stdout.splitlines()
    assert out[0].startswith(str(target))
    assert out[1].startswith('pip install "verifiers[ray]==0.2.0+vf" --index-url <your hub>/simple')
    assert "another project" in out[1]


def test_no_message_in_the_code_tells_users_to_install_verifiers_from_pypi() -> None:
    offenders = []
    for path in [*ROOT.joinpath("verifiers").rglob("*.py"), *ROOT.joinpath("trainers").rglob("*.py")]:
        text = path.read_text()
        for needle in ("pip install 'verifiers[", 'pip install "verifiers[', "pip install verifiers["):
            if needle in text:
                offenders.append(f"{path.relative_to(ROOT)}: {needle}")
    assert offenders == []
