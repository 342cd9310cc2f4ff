"""vf-install's feedback: what pip is doing while it runs, and a check that the installed CLIs start."""

from __future__ import annotations

import os
import sys

from verifiers.hub.pip_progress import PipProgress, run_pip

PIP_LIKE = r"""
import sys, time
for line in ["Looking in indexes: http://127.0.0.1/simple", "Collecting hubtest-env==0.2.0",
             "  Downloading http://127.0.0.1/files/hubtest_env-0.2.0-py3-none-any.whl (3.1 kB)",
             "Collecting verifiers==0.2.0+vf", "Collecting openai<4,>=3",
             "Installing collected packages: openai, verifiers, hubtest-env"]:
    print(line, flush=True)
    time.sleep(0.3)
sys.exit(3)
"""


def test_progress_lines_arrive_while_pip_runs_and_its_output_is_kept() -> None:
    lines: list[str] = []
    code, output = run_pip([sys.executable, "-c", PIP_LIKE], dict(os.environ), lines.append, every_s=0.25)
    assert code == 3 and "Installing collected packages" in output  # shown when pip fails
    assert lines and all(line.startswith("vf-install: pip is ") for line in lines)
    assert any("resolving: " in line and "packages collected" in line for line in lines)
    assert lines[-1].startswith("vf-install: pip is installing 3 packages (")


def test_phases_are_counted_from_pips_own_lines() -> None:
    p = PipProgress()
    for line in PIP_LIKE.split('"')[1::2][:5]:
        p.feed(line)
    assert p.line(12.4) == "vf-install: pip is resolving: 3 packages collected, 1 downloaded (12 s)"


def test_the_install_check_starts_the_clis_and_names_a_broken_one(tmp_path) -> None:
    import pytest

    from verifiers.errors import ConfigError
    from verifiers.hub.install import check_cli_starts

    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    check_cli_starts(sys.executable, {**os.environ, "PYTHONPATH": repo})  # this interpreter: both start
    broken = tmp_path / "rich"
    broken.mkdir()
    (broken / "__init__.py").write_text("raise ImportError('rich is broken in this venv')\n")
    with pytest.raises(ConfigError) as err:
        check_cli_starts(sys.executable, {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{repo}"})
    assert "installed, but vf-eval cannot start in" in str(err.value)
    assert "rich is broken in this venv" in str(err.value) and "pip check" in str(err.value)
