"""What vf-eval takes from the working directory is announced before it acts.

Running vf-eval inside a cloned repository reads its ``configs/endpoints.toml`` (which decides
where a model name, and the key for it, goes), executes its ``configs/endpoints.py`` (the 0.1.x
registry) and imports its ``environments/<module>/`` when that environment is not installed.
These conventions stay (as pytest keeps ``conftest.py``), but none of them may act unseen.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

import verifiers as vf
from verifiers.cli.eval import main
from verifiers.testing import ScriptedServer

TEST_ENVS = Path(__file__).resolve().parents[1] / "eval" / "envs"  # vf-eval-test-echo


@pytest.fixture(autouse=True)
def echo_env_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(TEST_ENVS))


def announced(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)


def test_a_registry_in_the_working_directory_is_announced_with_each_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with ScriptedServer() as srv:
        (tmp_path / "configs").mkdir()
        registry = tmp_path / "configs" / "endpoints.toml"
        registry.write_text(f'["gpt-4.1-mini"]\nmodel = "served-name"\nbase_url = "{srv.base_url}"\n')
        monkeypatch.chdir(tmp_path)
        with caplog.at_level(logging.WARNING):
            assert main(["vf-eval-test-echo", "-m", "gpt-4.1-mini", "-n", "1", "-r", "1"]) == 0
        assert {b["model"] for b in srv.requests} == {"served-name"}  # the alias did re-point the name
        url = srv.base_url
    text = announced(caplog)
    assert str(registry.resolve()) in text and "from the working directory" in text
    assert f"'gpt-4.1-mini' -> model 'served-name' at {url} (key from $OPENAI_API_KEY)" in text


def test_an_explicit_registry_is_not_announced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with ScriptedServer() as srv:
        registry = tmp_path / "mine.toml"
        registry.write_text(f'[m]\nmodel = "x"\nbase_url = "{srv.base_url}"\n')
        monkeypatch.chdir(tmp_path)
        with caplog.at_level(logging.WARNING):
            assert main(["vf-eval-test-echo", "-m", "m", "-e", str(registry), "-n", "1", "-r", "1"]) == 0
    assert "working directory" not in announced(caplog)


def test_a_python_registry_is_announced_before_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "configs").mkdir()
    marker = tmp_path / "ran.txt"
    (tmp_path / "configs" / "endpoints.py").write_text(
        "import logging, pathlib\n"
        f"pathlib.Path({str(marker)!r}).write_text('ran')\n"
        "ENDPOINTS = {'alias': {'model': 'm', 'url': 'http://127.0.0.1:9/v1', 'key': 'K'}}\n"
    )
    monkeypatch.chdir(tmp_path)
    with caplog.at_level(logging.WARNING):
        vf.eval.resolve_endpoints("alias")
    assert marker.read_text() == "ran"
    first = caplog.records[0].getMessage()
    assert "executing the 0.1.x Python registry" in first and str((tmp_path / "configs" / "endpoints.py").resolve()) in first
    assert "'alias' -> model 'm' at http://127.0.0.1:9/v1 (key from $K)" in announced(caplog)


def test_an_environment_imported_from_the_working_directory_is_announced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    pkg = tmp_path / "environments" / "cwd_probe_env" / "cwd_probe_env"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "import verifiers as vf\n\n"
        "def load_environment(**kw):\n"
        "    return vf.SingleTurnEnv(dataset=[{'question': 'q', 'answer': 'a'}])\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "cwd_probe_env", raising=False)
    with caplog.at_level(logging.WARNING):
        env = vf.load_environment("cwd-probe-env")
    assert isinstance(env, vf.SingleTurnEnv)
    text = announced(caplog)
    assert "'cwd-probe-env' is not installed: importing it from" in text
    assert str(pkg.parent.resolve()) in text and "pip install -e environments/cwd_probe_env" in text
