"""The terminal viewer (verifiers.eval.viewer) and the vf-view command, without a TTY."""

from __future__ import annotations

import importlib.util
import io
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from rich.console import Console

from verifiers.cli.view import main as vf_view_main
from verifiers.errors import ConfigError
from verifiers.eval.summary import fmt_stat, summarize
from verifiers.eval.viewer import list_runs, parse_rollout_ref, view


def _fixtures() -> ModuleType:
    name = "vf_tests_eval_fixtures_b"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("_fixtures_b.py"))
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules[name] = module
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    return sys.modules[name]


fx = _fixtures()


@pytest.fixture(scope="module")
def real_run(tmp_path_factory: pytest.TempPathFactory):
    return fx.build_run(tmp_path_factory.mktemp("out"))


def console(width: int = 160) -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=width, color_system=None), buf


def shown(path: Path | None, **kwargs) -> str:
    c, buf = console()
    view(path, c, **kwargs)
    return buf.getvalue()


def test_root_listing_shows_every_run_newest_first(real_run, tmp_path: Path) -> None:
    root = tmp_path / "evals"
    shutil.copytree(real_run.run_dir.parents[1], root)
    # A second run that died before writing metadata.json: listed by its directory name.
    orphan = root / f"{fx.ENV_ID}--other-model" / "zz-orphan"
    orphan.mkdir(parents=True)
    lines = (real_run.run_dir / "results.jsonl").read_text().splitlines()[:4]
    (orphan / "results.jsonl").write_text("\n".join(lines) + "\n")
    os.utime(orphan, (4_000_000_000, 4_000_000_000))  # newer than the real run

    runs = list_runs(root)
    assert [r.run_id for r in runs] == ["zz-orphan", real_run.run_dir.name]
    assert (runs[0].model, runs[0].status, runs[0].n) == ("other-model", "unknown", 4)
    assert runs[1].n == 12 and runs[1].reward_mean == pytest.approx(real_run.metadata.avg_reward)

    text = shown(root, interactive=False)
    for needle in (fx.ENV_ID, fx.MODEL, real_run.run_dir.name, "complete", "other-model", "zz-orphan"):
        assert needle in text
    assert f"{real_run.metadata.avg_reward:.4f}" in text


def test_non_tty_prints_and_returns(real_run) -> None:
    """Under pytest stdin is not a terminal: the default mode must print, not wait for input."""
    text = shown(real_run.run_dir)
    assert "Rollouts" in text and "Evaluation summary" in text


def test_run_view_has_metadata_summary_and_every_rollout(real_run) -> None:
    text = shown(real_run.run_dir, interactive=False)
    s = summarize(real_run.results, 3)
    assert fmt_stat(s.reward) in text
    assert real_run.metadata.run_id in text and real_run.metadata.base_url in text
    assert "ServerError" in text and "scoring: reward:fragile" in text
    rows = [
        line
        for line in text.splitlines()
        if line.startswith("│") and ("completed" in line or " error " in line)
    ]
    assert len(rows) == 12  # one table row per rollout


def test_rollout_transcript_shows_tool_traffic_and_scores(real_run) -> None:
    (r,) = [
        x
        for x in real_run.results
        if x.example_id == 0 and x.error is None and any(m["role"] == "tool" for m in x.completion)
    ]
    text = shown(real_run.run_dir, rollout=f"0:{r.rollout_index}")
    assert f"example 0 · rollout {r.rollout_index}" in text
    assert "tool call add" in text and '"a": 2' in text  # arguments pretty-printed
    assert "tool · call_" in text and "The answer is 5" in text
    assert "correct" in text and "fragile" in text and "1.0000" in text


def test_malformed_tool_arguments_and_markup_are_shown_verbatim(real_run) -> None:
    text = shown(real_run.run_dir, rollout="2")  # every rollout of example 2: malformed JSON arguments
    assert text.count("example 2 · rollout") == 3
    assert '{"a": 10, "b":' in text and "not valid JSON" in text
    hostile = shown(real_run.run_dir, rollout="3:0")
    assert "[bold red]not markup[/]" in hostile and "<script>" in hostile


def test_errored_rollout_shows_its_error(real_run) -> None:
    text = shown(real_run.run_dir, rollout="0:0")
    assert "ServerError (model)" in text and "(no completion)" in text


def test_unknown_rollout_names_what_exists(real_run) -> None:
    with pytest.raises(ConfigError, match=r"no rollout 9:9 .* example ids present: 0, 1, 2, 3"):
        view(real_run.run_dir, console()[0], rollout="9:9")
    with pytest.raises(ConfigError, match="needs a run directory"):
        view(real_run.run_dir.parents[1], console()[0], rollout="0:0")


def test_parse_rollout_ref() -> None:
    assert parse_rollout_ref("3:1") == (3, 1)
    assert parse_rollout_ref(" 7 ") == (7, None)
    for bad in ("a:b", "1:2:3", "", "-1:0"):
        with pytest.raises(ConfigError, match="EXAMPLE:ROLLOUT"):
            parse_rollout_ref(bad)


def test_interactive_session_from_the_root(real_run) -> None:
    root = real_run.run_dir.parents[1]
    # open run 1, show only rollouts with errors, open the first of them, go back, quit
    answers = io.StringIO("1\ne\n1\nzzz\nb\nq\n")
    text = shown(root, interactive=True, input_stream=answers, page_size=5)
    assert "Rollouts 1-5 of 12" in text
    assert "Rollouts 1-5 of 5 (with errors)" in text  # 2 errored + 3 with scoring errors
    assert "example 0 · rollout 0" in text and "ServerError (model)" in text
    assert "not understood: 'zzz'" in text
    assert text.count("Eval runs under") == 2  # "b" went back to the run list


def test_interactive_paging_and_end_of_input(real_run) -> None:
    answers = io.StringIO("n\nn\nn\np\n1:2\n")  # no "q": end of input must end the loop
    text = shown(real_run.run_dir, interactive=True, input_stream=answers, page_size=5)
    assert "Rollouts 6-10 of 12" in text and "Rollouts 11-12 of 12" in text
    assert text.count("Rollouts 11-12 of 12") == 2  # "n" on the last page stays there
    assert "example 1 · rollout 2" in text


def test_missing_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert "no saved runs" in shown(None)  # default outputs/evals absent: a message, not an error
    with pytest.raises(ConfigError, match="does not exist"):
        view(tmp_path / "nope", console()[0])
    assert "no saved runs under" in shown(tmp_path, interactive=False)


def run_vf_view(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "verifiers.cli.view", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "COLUMNS": "160"},
    )


def test_vf_view_command(real_run, tmp_path: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(real_run.run_dir.parents[1], project / "outputs" / "evals")
    listing = run_vf_view(cwd=project)  # no argument: ./outputs/evals
    assert listing.returncode == 0, listing.stderr
    assert real_run.run_dir.name in listing.stdout and "complete" in listing.stdout

    one = run_vf_view(str(real_run.run_dir), "--rollout", "1:0", cwd=tmp_path)
    assert one.returncode == 0, one.stderr
    assert "example 1 · rollout 0" in one.stdout and "KeyError (reward:fragile)" in one.stdout

    out = tmp_path / "r" / "page.html"
    rep = run_vf_view(str(real_run.run_dir), "--report", str(out), cwd=tmp_path)
    assert rep.returncode == 0, rep.stderr
    assert out.is_file() and str(out) in rep.stdout and "<!DOCTYPE html>" in out.read_text()


def test_vf_view_exit_codes(real_run, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Bad arguments exit 2 with a message naming the fix (in-process: same main() as the script)."""
    assert vf_view_main([str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert vf_view_main([str(real_run.run_dir.parents[1]), "--report"]) == 2
    assert "--report needs a run directory" in capsys.readouterr().err
    assert vf_view_main([str(real_run.run_dir), "--rollout", "x"]) == 2
    assert "EXAMPLE:ROLLOUT" in capsys.readouterr().err
    assert vf_view_main([str(real_run.run_dir), "--rollout", "3:1", "--no-interactive"]) == 0
    assert "example 3 · rollout 1" in capsys.readouterr().out


def _table_rewards(text: str) -> list[float]:
    """The reward column (4th) of every rollout row of the printed tables, in order."""
    rows = [line for line in text.splitlines() if line.startswith("│") and re.match(r"│\s*\d+\s*│", line)]
    return [float(line.split("│")[4]) for line in rows]


def test_rollouts_sorted_by_reward(real_run, capsys: pytest.CaptureFixture[str]) -> None:
    rewards = sorted(r.reward for r in real_run.results)
    assert len(set(rewards)) > 1  # the fixture run has different rewards, or this test proves nothing
    text = shown(real_run.run_dir, interactive=False, sort="reward")
    assert "Rollouts by reward, lowest first" in text
    assert _table_rewards(text) == pytest.approx(rewards, abs=1e-4)
    assert vf_view_main([str(real_run.run_dir), "--sort", "reward-desc", "--no-interactive"]) == 0
    assert _table_rewards(capsys.readouterr().out) == pytest.approx(rewards[::-1], abs=1e-4)
    with pytest.raises(ConfigError, match="cannot sort rollouts by 'tokens'"):
        view(real_run.run_dir, console()[0], sort="tokens")  # type: ignore[arg-type]


def test_interactive_transcript_is_not_buried_under_the_table_and_r_sorts(real_run) -> None:
    # open row 1, then enter (draws the table again), r (sort by reward), quit
    answers = io.StringIO("1\n\nr\nq\n")
    text = shown(real_run.run_dir, interactive=True, input_stream=answers, page_size=20)
    after_transcript = text.split("example 0 · rollout 0", 1)[1]
    between = after_transcript.split("> ", 1)[0]  # up to the next prompt
    assert "Rollouts 1-12 of 12" not in between and "prompt" in between
    assert after_transcript.count("Rollouts 1-12 of 12") == 2  # enter, then r
    sorted_part = text.split("Rollouts 1-12 of 12, by reward, lowest first", 1)[1]
    assert _table_rewards(sorted_part) == pytest.approx(sorted(r.reward for r in real_run.results), abs=1e-4)
