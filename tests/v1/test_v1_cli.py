"""vf-eval's v1 dialect: a taskset package run with upstream vf-eval's command line.

The calc_quiz taskset (tests/v1/conftest.py) is evaluated against the scripted server: with the
command line from issue 50, from an ``@ config.toml``, with ``-s`` shuffling; the saved run holds
results.jsonl and traces.jsonl; a harness or runtime that needs a sandbox or a cloud account is
refused naming the local alternative.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from verifiers.cli.eval import build_parser, main
from verifiers.testing import ScriptedServer, ServerScript
from verifiers.v1.cli import claims, resolve, translate


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _run_files(out_dir: Path) -> tuple[list[dict], list[dict], dict]:
    (results,) = out_dir.rglob("results.jsonl")
    traces = results.with_name("traces.jsonl")
    assert traces.is_file(), "traces.jsonl is written beside results.jsonl"
    key = lambda r: (r["example_id"], r["rollout_index"])  # noqa: E731
    meta = json.loads(results.with_name("metadata.json").read_text())
    return sorted(_lines(results), key=key), sorted(_lines(traces), key=key), meta


def test_the_issue_command_line_writes_results_and_traces(
    quiz_package: Path, quiz_script: ServerScript, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QUIZ_KEY", "k-123")
    out_dir = tmp_path / "out"
    with ScriptedServer.spawn(quiz_script) as srv:
        code = main(
            ["someone/calc-quiz@0.1.0", "-m", "scripted", "--client.base-url", srv.base_url,
             "--client.api-key-var", "QUIZ_KEY", "--env.agent.harness.id", "null",
             "--env.agent.runtime.type", "subprocess", "-n", "2", "-r", "2", "--no-push", "--no-rich",
             "-o", str(out_dir)]
        )  # fmt: skip
    assert code == 0
    results, traces, meta = _run_files(out_dir)
    assert [(r["example_id"], r["rollout_index"]) for r in results] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert [r["reward"] for r in results] == [pytest.approx(3.0)] * 2 + [pytest.approx(1.0)] * 2
    assert meta["env_args"] == {
        "agent": {"harness": {"id": "null"}, "runtime": {"type": "subprocess"}},
        "select": {"limit": 2},
    }
    assert meta["rollouts_per_example"] == 2 and meta["api_key_var"] == "QUIZ_KEY"
    assert [(t["example_id"], t["rollout_index"]) for t in traces] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    first, last = traces[0], traces[-1]
    assert first["rewards"] == {
        "correct": {"score": 1.0, "weight": 2.0},
        "brief": {"score": 1.0, "weight": 0.5},
        "used_tool": {"score": 1.0, "weight": 0.5},
    }
    assert first["metrics"] == {"calls": 1.0, "turns": 2.0}
    assert first["reward"] == pytest.approx(3.0) and last["reward"] == pytest.approx(1.0)
    assert last["rewards"]["correct"] == {"score": 0.0, "weight": 2.0}
    assert first["task"]["type"] == "QuizTask" and first["task"]["data"]["answer"] == "5"
    assert first["stop_condition"] == "agent_completed" and first["ok"] and first["errors"] == []
    assert first["num_turns"] == 2 and not first["is_truncated"] and not first["is_timeout"]
    assert [m["role"] for m in first["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert [c["model"] for c in first["calls"]] == ["scripted", "scripted"]
    assert [t["function"]["name"] for t in first["tools"]] == ["calc_add"]
    assert first["agent"]["config"]["harness"]["id"] == "null"
    assert first["timing"]["agent"]["end"] >= first["timing"]["start"] > 0
    assert "k-123" not in (out_dir.rglob("traces.jsonl").__next__()).read_text()


def test_an_at_config_toml_is_merged_under_the_flags(
    quiz_package: Path, quiz_script: ServerScript, tmp_path: Path
) -> None:
    out_dir = tmp_path / "out"
    with ScriptedServer(quiz_script) as srv:
        config = tmp_path / "eval.toml"
        config.write_text(
            f'model = "scripted"\nnum-rollouts = 3\noutput_dir = "{out_dir}"\n'
            f'[client]\nbase-url = "{srv.base_url}"\n'
            '[env.taskset]\nid = "calc-quiz"\nnum-tasks = 3\n'
            "[env.agent]\nmax-turns = 4\n"
            "[select]\nlimit = 1\n"
        )
        code = main(["@", str(config), "-r", "2", "--no-rich", "--select.skip", "1"])
    assert code == 0
    results, traces, meta = _run_files(out_dir)
    # the file's -r 3 lost to the command line's -r 2; its limit 1 applies after the flag's skip 1
    assert [(r["example_id"], r["rollout_index"]) for r in results] == [(1, 0), (1, 1)]
    assert meta["env_args"] == {"num_tasks": 3, "agent": {"max_turns": 4}, "select": {"skip": 1, "limit": 1}}
    assert len(traces) == 2 and traces[0]["task"]["data"]["prompt"] == "What is 1+1?"


def test_s_shuffles_in_the_v1_dialect(quiz_package: Path, quiz_script: ServerScript, tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    with ScriptedServer(quiz_script) as srv:
        code = main(
            ["calc-quiz", "-m", "scripted", "--client.base-url=" + srv.base_url, "--env.taskset.num-tasks=3",
             "-s", "--select.seed", "4", "-n", "2", "--no-rich", "-o", str(out_dir)]
        )  # fmt: skip
    assert code == 0
    results, _, meta = _run_files(out_dir)
    # random.Random(4) orders the three tasks [2, 1, 0]: -n 2 takes tasks 2 and 1 (unshuffled: 0 and 1)
    assert sorted(r["example_id"] for r in results) == [1, 2]
    assert meta["env_args"]["select"] == {"shuffle": True, "seed": 4, "limit": 2}


def test_help_explains_the_two_dialects(quiz_package: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert "SHUFFLES" in build_parser().format_help()
    assert main(["calc-quiz", "--help"]) == 0
    shown = capsys.readouterr().out
    assert "-s, --select.shuffle" in shown and "in our dialect -s saves" in shown
    assert "--env.taskset.num-tasks int (default: 2)" in shown and "--client.base-url" in shown


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--env.agent.harness.id", "codex"], "--env.agent.harness.id null"),
        (["--env.agent.runtime.type", "prime"], "Prime Intellect account"),
        (["--env.agent.runtime.type=modal"], "--env.agent.runtime.type subprocess"),
        (["--env.agent.runtime.type", "docker"], "container runtime"),
        (["--client.type", "train"], "training client"),
        (["--select.limit", "0"], "--select.limit"),
        (["--bogus", "1"], "--bogus"),
        (["-R"], "unknown flag '-R'"),
    ],
)
def test_what_cannot_run_here_is_a_clean_config_error(
    quiz_package: Path, capsys: pytest.CaptureFixture[str], flags: list[str], said: str
) -> None:
    assert main(["calc-quiz", "-m", "m", *flags]) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err and err.startswith("vf-eval: error")


def test_parsing_follows_upstreams_rules(quiz_package: Path) -> None:
    taskset_id, opts = resolve(
        ["calc-quiz", "--sampling.max_tokens=5", "--sampling.temperature", "0.5", "--sampling.seed", "7",
         "--select.shuffle", "false", "--rollouts-per-example", "3", "-c", "null", "--no-rich", "--push",
         "--env.taskset.task.rewards", '{"style": {"weight": 0}}', "-v"]
    )  # fmt: skip
    assert taskset_id == "calc-quiz" and opts.num_rollouts == 3 and opts.max_concurrent is None
    assert opts.rich is False and opts.push and opts.verbose and not opts.select.shuffle
    notes: list[str] = []
    config = translate(taskset_id, opts, notes)
    assert config.sampling_args == {"max_tokens": 5, "temperature": 0.5, "seed": 7}
    assert config.env_args == {"task": {"rewards": {"style": {"weight": 0}}}}
    assert config.max_concurrent == 0 and config.num_examples == -1 and config.save
    assert config.model == "deepseek/deepseek-v4-flash" and config.api_key_var == "PRIME_API_KEY"
    assert notes == ["--push: this vf-eval pushes nowhere; the run is saved locally only"]
    assert resolve(["calc-quiz"])[1].num_rollouts == 1 and resolve(["calc-quiz"])[1].max_concurrent == 128


def test_our_dialect_keeps_our_environments(quiz_package: Path) -> None:
    assert claims(["calc-quiz", "-n", "2"]) and claims(["--env.taskset.id", "calc-quiz"]) and claims(["@", "x.toml"])
    assert not claims(["no-such-env", "-n", "2"]) and not claims(["--view"]) and not claims([])
