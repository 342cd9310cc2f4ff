"""``vf-eval`` typed as 0.1.x users type it: real processes (``python -m verifiers.cli.eval``)
against a scripted OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from verifiers.eval.endpoints import resolve_endpoints
from verifiers.eval.legacy_flags import default_hub_dataset_name, hub_dataset
from verifiers.testing import ScriptedServer, ServerScript

ROOT = Path(__file__).resolve().parents[2]

LOCAL_ENV = textwrap.dedent(
    """
    # a 0.1.x environment kept as a flat module beside its pyproject.toml
    import verifiers as vf
    from datasets import Dataset


    def load_environment(**kwargs):
        rows = [{"question": "hi", "answer": "hi"}, {"question": "yo", "answer": "yo"}]

        def exact(completion, answer, **kw):
            return float(completion[-1]["content"] == answer)

        return vf.SingleTurnEnv(dataset=Dataset.from_list(rows), rubric=vf.Rubric(funcs=[exact]))
    """
)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    env_dir = tmp_path / "environments" / "legacy_echo"
    env_dir.mkdir(parents=True)
    (env_dir / "legacy_echo.py").write_text(LOCAL_ENV)
    (env_dir / "pyproject.toml").write_text('[project]\nname = "legacy-echo"\nversion = "0.1.0"\n')
    return tmp_path


def vf_eval(cwd: Path, *args: str, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    env.pop("OPENAI_API_KEY", None)
    env.update(extra_env or {})
    return subprocess.run(
        [sys.executable, "-m", "verifiers.cli.eval", *args, "--no-progress"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )


def test_env_dir_path_api_base_url_and_python_endpoints_registry(workdir: Path, server: ScriptedServer) -> None:
    # -p DIR + --api-base-url, flat-module layout, 0.1.x long flags
    res = vf_eval(
        workdir, "legacy-echo", "-p", "environments", "--api-base-url", server.base_url, "-m", "m1",
        "-n", "2", "-r", "1", "--save-results", "-N",
    )
    assert res.returncode == 0, res.stderr
    assert "no-interleave-scoring" in res.stderr  # accepted, with a note
    assert [r["model"] for r in server.requests] == ["m1", "m1"]
    assert [p.name for p in (workdir / "outputs" / "evals").iterdir()] == ["legacy-echo--m1"]

    # ENDPOINTS in ./configs/endpoints.py, found without -e; the default ./environments is used too
    (workdir / "configs").mkdir()
    (workdir / "configs" / "endpoints.py").write_text(
        f'ENDPOINTS = {{"echo-small": {{"model": "served-name", "url": "{server.base_url}", "key": "ECHO_KEY"}}}}\n'
    )
    server.reset()
    res = vf_eval(workdir, "legacy-echo", "-m", "echo-small", "-n", "1", "-r", "2", extra_env={"ECHO_KEY": "k"})
    assert res.returncode == 0, res.stderr
    assert [r["model"] for r in server.requests] == ["served-name", "served-name"]
    # the folder given with -e, as 0.1.x accepted
    endpoints, alias = resolve_endpoints("echo-small", endpoints_path=workdir / "configs")
    assert alias == "echo-small" and endpoints[0].api_key_var == "ECHO_KEY"


def test_exit_status_when_rollouts_error_and_first_messages(workdir: Path, make_server) -> None:
    failing = make_server(ServerScript(fail_first=100, fail_first_status=500))
    res = vf_eval(
        workdir, "legacy-echo", "-p", "environments", "-b", failing.base_url, "-n", "2", "-r", "1",
        "--max-retries", "0",
    )
    assert res.returncode == 1, res.stdout + res.stderr
    assert "First error message of each type" in res.stdout
    assert "ServerError: " in res.stdout and "scripted failure (HTTP 500)" in res.stdout
    assert "100% of 2 rollouts errored" in res.stderr

    half = make_server(ServerScript(fail_first=1, fail_first_status=500))
    args = ["legacy-echo", "-p", "environments", "-b", half.base_url, "-n", "2", "-r", "1", "--max-retries", "0",
            "-c", "1"]
    assert vf_eval(workdir, *args).returncode == 0  # default: only when every rollout errored
    half.set_script(ServerScript(fail_first=1, fail_first_status=500))
    assert vf_eval(workdir, *args, "--fail-threshold", "0.5").returncode == 1


def test_save_to_hf_hub_offline_is_a_clear_error_and_the_dataset_is_ready(
    workdir: Path, server: ScriptedServer
) -> None:
    res = vf_eval(
        workdir, "legacy-echo", "-p", "environments", "-b", server.base_url, "-m", "m/x", "-n", "2", "-r", "2",
        "-H", "-D", "me/legacy-echo-evals",
    )
    assert res.returncode == 1
    assert "cannot push to the Hugging Face Hub" in res.stderr and "offline" in res.stderr
    run_dir = next((workdir / "outputs" / "evals").glob("*/*"))
    ds = hub_dataset(run_dir)  # exactly what -H would push
    assert len(ds) == 4 and set(ds["reward"]) == {1.0}
    ds.save_to_disk(str(workdir / "pushed"))
    from datasets import load_from_disk

    assert load_from_disk(str(workdir / "pushed"))["example_id"] == ds["example_id"]
    assert default_hub_dataset_name("legacy-echo", "org/Model 7B") == "legacy-echo--org-Model-7B"


def test_unsupported_0_1_x_flags_are_refused_by_name(workdir: Path) -> None:
    res = vf_eval(workdir, "legacy-echo", "-x", '{"max_turns": 3}')
    assert res.returncode == 2 and "--extra-env-kwargs" in res.stderr
    for flag, value, name in [("-x", "{}", "--extra-env-kwargs"), ("-C", "", "--state-columns")]:
        res = vf_eval(workdir, "legacy-echo", flag, value)  # refused whatever the value, as docs/compat.md says
        assert res.returncode == 2 and name in res.stderr and "Traceback" not in res.stderr
    res = vf_eval(workdir, "legacy-echo", "--independent-scoring")
    assert res.returncode == 2 and "--independent-scoring" in res.stderr
    res = vf_eval(workdir, "legacy-echo", "-p", "no-such-dir")
    assert res.returncode == 2 and "--env-dir-path" in res.stderr
    res = vf_eval(workdir, "evals.toml")
    assert res.returncode == 2 and "TOML eval configs" in res.stderr


def test_python_registry_errors_are_config_errors(tmp_path: Path) -> None:
    import verifiers as vf
    from verifiers.eval.endpoints import load_endpoints

    bad = tmp_path / "endpoints.py"
    bad.write_text("ENDPOINTS = 3\n")
    with pytest.raises(vf.ConfigError, match="must define ENDPOINTS"):
        load_endpoints(bad)
    bad.write_text('ENDPOINTS = {"a": {"model": "m"}}\n')
    with pytest.raises(vf.ConfigError, match="base_url"):
        load_endpoints(bad)
