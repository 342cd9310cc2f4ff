"""vf-install: from a hub over HTTP, a folder, a wheel and a git URL, into a fresh virtualenv; then eval it.

Each install runs real pip in a new virtualenv (see conftest.py) and ends with the
environment loaded in that interpreter; the hub round trip ends with ``vf-eval`` run by
the new interpreter against a scripted model server.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from verifiers.cli.install import main as vf_install
from verifiers.errors import ConfigError
from verifiers.hub.install import configured_hub, install_environment, resolve_spec
from verifiers.hub.scaffold import scaffold_environment
from verifiers.testing import ScriptedReply, ScriptedServer, ServerScript

WHEEL_1 = "hubtest_env-0.1.0-py3-none-any.whl"
WHEEL_2 = "hubtest_env-0.2.0-py3-none-any.whl"


def _installed_version(helpers, python: Path, cwd: Path) -> str:
    code = (
        "import importlib.metadata as m, hubtest_env; print(m.version('hubtest-env'), hubtest_env.__file__)"
    )
    proc = helpers.run_python(python, code, cwd)
    assert proc.returncode == 0, proc.stderr
    version, module_file = proc.stdout.split()
    assert Path(module_file).is_relative_to(python.parent.parent)  # imported from the new venv
    return version


def test_hub_round_trip_install_then_eval(
    hub_server, venv_python: Path, tmp_path: Path, helpers, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    index = f"{hub_server.url}/simple"
    # A pinned version is fetched over HTTP from the hub.
    assert vf_install([f"{helpers.env_id}@0.1.0", "--index-url", index, "--python", str(venv_python)]) == 0
    out = capsys.readouterr().out
    assert "hubtest-env 0.1.0 loads: SingleTurnEnv (train=4, eval=3)" in out
    assert " <- " not in out  # one line per package only with -v
    host = hub_server.url.split("//", 1)[1].rstrip("/")
    assert "  from: " in out and f"from {host} (-v lists each package)" in out
    assert helpers.wait_for(lambda: f"GET /files/{WHEEL_1} HTTP/1.1" in hub_server.requests())
    assert _installed_version(helpers, venv_python, tmp_path) == "0.1.0"

    # NAME alone means the newest version on the hub, found through the configured hub URL.
    monkeypatch.setenv("VF_HUB_URL", index)
    assert vf_install([helpers.env_id, "--python", str(venv_python)]) == 0
    assert helpers.wait_for(lambda: f"GET /files/{WHEEL_2} HTTP/1.1" in hub_server.requests())
    assert _installed_version(helpers, venv_python, tmp_path) == "0.2.0"

    # The new interpreter evaluates it by id against a scripted model.
    script = ServerScript(replies=[ScriptedReply(content="<answer>{last_user}</answer>")])
    with ScriptedServer(script) as model:
        proc = subprocess.run(
            [
                str(venv_python),
                "-m",
                "verifiers.cli.eval",
                helpers.env_id,
                "-b",
                model.base_url,
                "-m",
                "test-model",
                "-n",
                "2",
                "-r",
                "1",
                "-s",
                "-o",
                str(tmp_path / "outputs"),
            ],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env={**_clean_env(), "OPENAI_API_KEY": "unused"},
            check=False,
        )
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        assert model.n_requests == 2
    [results] = list((tmp_path / "outputs").rglob("results.jsonl"))
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert len(rows) == 2
    assert [r["metrics"]["exact_answer"] for r in rows] == [1.0, 1.0]
    assert all(r["error"] is None for r in rows)


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def test_install_from_local_folder_by_name(venv_python: Path, tmp_path: Path, helpers) -> None:
    environments = tmp_path / "environments"
    package = Path(scaffold_environment("folder-env", environments, kind="multi").package_dir)
    result = install_environment("folder-env", python=str(venv_python), environments_dir=environments)
    assert result.target.kind == "folder"
    assert result.installed == ["folder-env"]
    assert [(e.env_id, e.class_name, e.num_eval) for e in result.environments] == [
        ("folder-env", "EchoGameEnv", 4)
    ]
    assert not (package / "build").exists() and not list(package.glob("*.egg-info"))  # source left clean
    proc = helpers.run_python(venv_python, "import folder_env; print(folder_env.__file__)", tmp_path)
    assert Path(proc.stdout.strip()).is_relative_to(venv_python.parent.parent)

    # The same folder again reinstalls (a folder means "what is in it now").
    init = package / "folder_env" / "__init__.py"
    init.write_text(init.read_text() + "\nMARK = 'second'\n")
    install_environment(str(package), python=str(venv_python))
    assert (
        helpers.run_python(venv_python, "import folder_env; print(folder_env.MARK)", tmp_path).stdout
        == "second\n"
    )


def test_install_from_wheel_file(built_hub, venv_python: Path, tmp_path: Path, helpers) -> None:
    wheel = shutil.copy(built_hub.dir / "files" / WHEEL_1, tmp_path)
    result = install_environment(str(wheel), python=str(venv_python), env_args={"num_eval_examples": 2})
    assert result.target.kind == "wheel"
    assert [(e.env_id, e.version, e.num_eval) for e in result.environments] == [("hubtest-env", "0.1.0", 2)]
    assert _installed_version(helpers, venv_python, tmp_path) == "0.1.0"


def test_install_from_git_url(venv_python: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    scaffold_environment("git-env", repo, kind="tool")
    git = ["git", "-C", str(repo), "-c", "user.name=test", "-c", "user.email=test@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "add git-env"], check=True)

    url = f"git+{repo.as_uri()}#subdirectory=git_env"
    result = install_environment(url, python=str(venv_python))
    assert result.target.kind == "git"
    assert result.target.project == "git-env"
    assert [(e.env_id, e.class_name) for e in result.environments] == [("git-env", "ToolEnv")]


def test_bad_specs_fail_with_clear_errors(hub_server, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    index = f"{hub_server.url}/simple"

    def error(*argv: str) -> str:
        capsys.readouterr()
        assert vf_install([*argv, "--python", sys.executable]) == 2
        return capsys.readouterr().err

    assert "no environment package folder at" in error("./missing-folder")
    assert "no wheel file at" in error("missing-1.0-py3-none-any.whl")
    err = error("no-such-env", "--index-url", index)
    assert "'no-such-env' is not on the hub" in err and "hubtest-env" in err  # lists what is there
    err = error("hubtest-env@9.9", "--index-url", index)
    assert "version 9.9" in err and "0.1.0, 0.2.0" in err
    err = error("hubtest-env")  # not in ./environments, no hub configured
    assert "no hub is configured" in err and "VF_HUB_URL" in err and "hub.toml" in err
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    assert "cannot reach the hub" in error("hubtest-env", "--index-url", f"http://127.0.0.1:{closed}/simple")
    assert "invalid environment name" in error("bad name!")


def test_environment_that_fails_to_load_is_reported(venv_python: Path, tmp_path: Path, capsys) -> None:
    package = Path(scaffold_environment("broken-load", tmp_path).package_dir)
    init = package / "broken_load" / "__init__.py"
    init.write_text(
        init.read_text().replace(
            '    """Build the', '    raise RuntimeError("dataset server down")\n    """Build the', 1
        )
    )
    assert vf_install([str(package), "--python", str(venv_python)]) == 2
    err = capsys.readouterr().err
    assert "failed to load" in err and "broken-load" in err and "dataset server down" in err
    assert "pip uninstall broken-load" in err


def test_hub_url_configuration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "xdg" / "verifiers" / "hub.toml"
    config.parent.mkdir(parents=True)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    config.write_text(
        'index_url = "http://hub.internal:8000/simple"\nextra_index_urls = ["https://pypi.org/simple"]\n'
    )
    assert configured_hub().index_url == "http://hub.internal:8000/simple"
    target = resolve_spec("some-env@1.2", environments_dir=tmp_path)
    assert (target.kind, target.requirement, target.index_url) == (
        "index",
        "some-env==1.2",
        "http://hub.internal:8000/simple",
    )
    monkeypatch.setenv("VF_HUB_URL", "http://other:9000/simple")  # the variable wins over the file
    assert resolve_spec("some-env", environments_dir=tmp_path).index_url == "http://other:9000/simple"
    # --index-url wins over both, and over a local folder of that name.
    scaffold_environment("some-env", tmp_path)
    assert resolve_spec("some-env", environments_dir=tmp_path).kind == "folder"
    assert resolve_spec("some-env", index_url="http://x/simple", environments_dir=tmp_path).kind == "index"
    config.write_text('index_url = "http://hub/simple"\nindexurl = "typo"\n')
    with pytest.raises(ConfigError, match="not a valid hub config"):
        configured_hub()
