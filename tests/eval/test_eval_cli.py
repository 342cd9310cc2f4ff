"""vf-eval's command line, called in-process through ``main(argv)`` (fast) against real servers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from verifiers.cli.eval import build_parser, config_from_args, main
from verifiers.testing import ScriptedReply, ScriptedServer, ServerScript

from .conftest import REVERSE_ANSWER, read_meta, read_rows, run_dirs

pytestmark = pytest.mark.usefixtures("importable_envs")


def test_every_flag_reaches_the_config(tmp_path: Path) -> None:
    argv = [
        "my-env", "-a", '{"difficulty": 3}', "-m", "mod", "-b", "http://127.0.0.1:1/v1", "-k", "MY_KEY",
        "-e", str(tmp_path / "e.toml"), "-n", "-1", "-r", "4", "-c", "8", "-t", "64", "-T", "0.7",
        "-S", '{"temperature": 0.1, "top_p": 0.5}', "-o", str(tmp_path / "o"), "-R",
        "--header", "X-A: 1", "--header", "X-B:two words", "--timeout", "12.5", "--max-retries", "0",
        "-v", "--no-progress", "--no-check", "--progress-every", "2.5",
    ]  # fmt: skip
    c = config_from_args(build_parser().parse_args(argv))
    assert c.env_id == "my-env" and c.env_args == {"difficulty": 3}
    assert (c.model, c.base_url, c.api_key_var) == ("mod", "http://127.0.0.1:1/v1", "MY_KEY")
    assert c.endpoints_path == tmp_path / "e.toml"
    assert (c.num_examples, c.rollouts_per_example, c.max_concurrent) == (-1, 4, 8)
    assert c.sampling_args == {"max_tokens": 64, "temperature": 0.1, "top_p": 0.5}  # -S wins over -T
    assert c.save and c.output_dir == tmp_path / "o" and c.resume is True
    assert c.headers == {"X-A": "1", "X-B": "two words"}
    assert (c.rollout_timeout_s, c.max_retries, c.verbose, c.show_progress) == (12.5, 0, True, False)
    assert (c.check_endpoint, c.progress_every_s) == (False, 2.5)

    defaults = config_from_args(build_parser().parse_args(["my-env"]))
    assert (defaults.num_examples, defaults.rollouts_per_example, defaults.max_concurrent) == (5, 3, 32)
    assert not defaults.save and defaults.sampling_args == {} and defaults.api_key_var is None
    assert defaults.check_endpoint and defaults.progress_every_s == 10.0
    explicit = config_from_args(build_parser().parse_args(["my-env", "--resume", str(tmp_path / "run")]))
    assert explicit.resume == tmp_path / "run" and explicit.save


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["-a", "{bad json"], "-a/--env-args must be a JSON object"),
        (["-a", "[1, 2]"], "JSON object (a dict), got list"),
        (["-S", "nope"], "-S/--sampling-args must be a JSON object"),
        (["--header", "no-colon"], "--header must look like 'Name: value'"),
        (["-n", "0"], "-n/--num-examples"),
        (["-r", "0"], "-r/--rollouts-per-example"),
        (["--timeout", "0"], "--timeout must be > 0"),
        (["-e", "/nonexistent/endpoints.toml"], "endpoints file"),
        (["-a", '{"unknown_kw": 1}'], "rejected the arguments"),
    ],
)
def test_config_errors_exit_2_with_one_clear_line(
    args: list[str], needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["vf-eval-test-echo", "-b", "http://127.0.0.1:9/v1", "-o", str(tmp_path), *args])
    err = capsys.readouterr().err
    assert code == 2
    assert needle in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "evals").exists()  # nothing written for a bad configuration


def test_unknown_environment_and_verbose_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["no-such-env-xyz", "-b", "http://127.0.0.1:9/v1"]) == 2
    err = capsys.readouterr().err
    assert "not installed" in err and "Traceback" not in err
    assert main(["no-such-env-xyz", "-b", "http://127.0.0.1:9/v1", "-v"]) == 2
    assert "Traceback" in capsys.readouterr().err


def test_missing_env_id_is_a_config_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "missing the environment id" in capsys.readouterr().err


def test_reverse_text_end_to_end_with_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = ServerScript(replies=[ScriptedReply(content=REVERSE_ANSWER)])
    with ScriptedServer(script) as srv:
        code = main(
            ["reverse-text", "-m", "scripted", "-b", srv.base_url, "-n", "3", "-r", "2", "-s", "-o", str(tmp_path),
             "--no-progress", "-t", "256", "-T", "0"]
        )  # fmt: skip
        assert all(b["max_tokens"] == 256 and b["temperature"] == 0 for b in srv.requests)
    out = capsys.readouterr().out
    assert code == 0
    (run_dir,) = run_dirs(tmp_path)
    assert run_dir.parent.name == "reverse-text--scripted"
    assert f"Saved: {run_dir}" in out and "pass@k" in out and "lcs_reward" in out
    rows = read_rows(run_dir)
    assert len(rows) == 6 and all(r["reward"] == pytest.approx(1.2) for r in rows)
    meta = read_meta(run_dir)
    assert meta["sampling_args"] == {"max_tokens": 256, "temperature": 0.0}
    assert meta["avg_metrics"] == {"lcs_reward": pytest.approx(1.0), "format_reward_func": pytest.approx(1.0)}


def test_env_args_and_all_examples(tmp_path: Path) -> None:
    with ScriptedServer() as srv:
        code = main(
            ["reverse-text", "-b", srv.base_url, "-a", '{"num_eval_examples": 7, "num_train_examples": 0}',
             "-n", "-1", "-r", "1", "-o", str(tmp_path), "--no-progress"]
        )  # fmt: skip
    assert code == 0
    (run_dir,) = run_dirs(tmp_path)
    meta = read_meta(run_dir)
    assert meta["env_args"] == {"num_eval_examples": 7, "num_train_examples": 0}
    assert meta["num_examples"] == 7 and len(read_rows(run_dir)) == 7


def test_placeholder_key_is_mentioned_only_when_verbose(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("VF_TEST_NO_KEY", raising=False)
    with ScriptedServer() as srv:
        base = ["vf-eval-test-echo", "-b", srv.base_url, "-k", "VF_TEST_NO_KEY", "-n", "1", "-r", "1"]
        assert main(base) == 0
        assert "EMPTY" not in capsys.readouterr().err
        assert main([*base, "-v"]) == 0
        assert "VF_TEST_NO_KEY is not set" in capsys.readouterr().err


def test_endpoint_alias_from_the_default_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with ScriptedServer() as srv:
        (tmp_path / "configs").mkdir()
        (tmp_path / "configs" / "endpoints.toml").write_text(
            f'[tiny]\nmodel = "served-name"\nbase_url = "{srv.base_url}"\napi_key_var = "TINY_KEY"\n'
        )
        monkeypatch.chdir(tmp_path)  # ./configs/endpoints.toml is searched first
        assert main(["vf-eval-test-echo", "-m", "tiny", "-n", "2", "-r", "1", "-s"]) == 0
        assert {b["model"] for b in srv.requests} == {"served-name"}
        # -e picks another registry, where the same alias means something else.
        other = tmp_path / "elsewhere.toml"
        other.write_text(f'[tiny]\nmodel = "other-name"\nbase_url = "{srv.base_url}"\n')
        srv.reset()
        assert main(["vf-eval-test-echo", "-m", "tiny", "-e", str(other), "-n", "1", "-r", "1"]) == 0
        assert {b["model"] for b in srv.requests} == {"other-name"}
    (run_dir,) = run_dirs(tmp_path / "outputs")  # default output dir
    meta = read_meta(run_dir)
    assert (
        meta["model"] == "served-name" and meta["model_alias"] == "tiny" and meta["api_key_var"] == "TINY_KEY"
    )


def test_every_rollout_erroring_fails_the_command_and_saves_the_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with ScriptedServer(ServerScript(error_rate=1.0, error_statuses=[500])) as srv:
        code = main(["vf-eval-test-echo", "-b", srv.base_url, "--max-retries", "0", "-o", str(tmp_path)])
    assert code == 1  # a run where nothing worked must not look like a result
    (run_dir,) = run_dirs(tmp_path)
    assert read_meta(run_dir)["errors_by_type"] == {"ServerError": 15}
    assert "ServerError" in capsys.readouterr().out  # errors by type in the summary


def test_report_dataset_and_view_of_a_saved_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("verifiers.eval.report")
    from datasets import load_from_disk

    with ScriptedServer() as srv:
        code = main(
            ["vf-eval-test-echo", "-b", srv.base_url, "-n", "2", "-r", "2", "-o", str(tmp_path), "--report",
             "--save-dataset", str(tmp_path / "ds")]
        )  # fmt: skip
    assert code == 0
    (run_dir,) = run_dirs(tmp_path)
    out = capsys.readouterr().out
    assert f"Report: {run_dir / 'report.html'}" in out and (run_dir / "report.html").stat().st_size > 0
    ds = load_from_disk(str(tmp_path / "ds"))
    assert len(ds) == 4
    assert main(["--view", str(run_dir)]) == 0
    assert json.loads((run_dir / "metadata.json").read_text())["run_id"] in capsys.readouterr().out
