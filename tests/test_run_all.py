"""`benchmarks/run_all.py`: each benchmark's last JSON line becomes rows of one table in the README.

The benchmarks themselves are measured elsewhere; here a real child process stands in for one
(it prints progress, then its JSON), and the README rewrite is checked on text with and without
the markers, keeping the rows of benchmarks that were not rerun.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="module")
def run_all(benchmark_script: Callable[[str], Any]) -> Any:
    return benchmark_script("run_all")


TRAINER_STEP = {"ours_s_per_step": 0.4, "trl_s_per_step": 0.5, "ratio": 0.8, "target_ratio": 0.5,
                "model": {"params": 801408}, "learner_mfu": 0.45, "peak_tflops": 0.093,
                "ours_phases_s": {"generation": 0.14, "fwd_bwd": 0.24, "optimizer": 0.01}}


def test_a_benchmark_process_becomes_rows_with_date_load_and_settings(run_all: Any, tmp_path: Path) -> None:
    script = tmp_path / "fake_trainer_step.py"
    script.write_text(f"import json, sys\nprint('warming up')\nprint(json.dumps({TRAINER_STEP!r}))\n")
    bench = run_all.Bench("trainer_step", ["--quick-ish"], [], run_all.rows_trainer_step, 60, path=script)
    rows, out = run_all.run_bench(bench, True, tmp_path)
    assert out == TRAINER_STEP
    assert [r.benchmark for r in rows] == ["trainer_step", "trainer_step"]
    step = rows[0]
    assert (step.ours, step.peer, step.ratio, step.target, step.met) == ("0.400", "0.500", "0.800", "≤ 0.5", "**no**")
    assert "0.8M params" in step.figure
    assert rows[1].ours == "0.450" and "93.0 GFLOP/s" in rows[1].peer
    assert step.settings == "--quick-ish" and "→" in step.load and step.date.count("-") == 2
    assert "warming up" in (tmp_path / "trainer_step.log").read_text()


def test_one_script_as_two_benches_keeps_each_size_s_rows_apart(run_all: Any, tmp_path: Path) -> None:
    """The 25M trainer_step rows carry their own bench name, so rerunning one size keeps the other's rows."""
    big = {**TRAINER_STEP, "model": {"params": 25229824},
           "rounds": [{"ratio": 0.47}, {"ratio": 0.52}, {"ratio": 0.49}]}
    script = tmp_path / "fake_trainer_step.py"
    script.write_text(f"import json\nprint(json.dumps({big!r}))\n")
    bench = run_all.Bench("trainer_step_25m", ["--size", "25m"], [], run_all.rows_trainer_step, 60, path=script)
    rows, _ = run_all.run_bench(bench, True, tmp_path)
    assert [r.benchmark for r in rows] == ["trainer_step_25m", "trainer_step_25m"]
    assert "25.2M params" in rows[0].figure and "ratio per round 0.470 / 0.520 / 0.490" in rows[0].figure
    small = run_all.Row("trainer_step", "s per GRPO step (0.8M params)", "0.2")
    text = run_all.update_readme(f"# B\n\n{run_all.BEGIN}\n{run_all.table([small])}\n{run_all.END}\n", rows,
                                 {"trainer_step_25m"})
    kept = run_all.parse_table(text.split(run_all.BEGIN)[1].split(run_all.END)[0])
    assert [r.benchmark for r in kept] == ["trainer_step", "trainer_step_25m", "trainer_step_25m"]
    again = run_all.update_readme(text, rows, {"trainer_step_25m"})  # a rerun replaces, never duplicates
    assert again == text
    assert {"trainer_step_25m", "trainer_step_104m"} <= {b.name for b in run_all.BENCHES}


def test_a_benchmark_without_a_json_line_is_a_failed_row(run_all: Any, tmp_path: Path) -> None:
    script = tmp_path / "broken.py"
    script.write_text("print('no json here')\nraise SystemExit(3)\n")
    bench = run_all.Bench("gateway_overhead", [], [], run_all.rows_gateway_overhead, 60, path=script)
    rows, out = run_all.run_bench(bench, False, tmp_path)
    assert out == {}
    assert len(rows) == 1 and rows[0].figure.startswith("FAILED: last stdout line is not JSON")


def test_streaming_and_plain_serve_vs_vllm_outputs(run_all: Any) -> None:
    plain = run_all.rows_serve_vs_vllm({"sizes": {"tiny": {"vf_serve_tok_s": 1200.0, "vllm_tok_s": 1000.0,
                                                           "ratio": 1.2}}})
    assert [(r.ours, r.peer, r.met) for r in plain] == [("1,200", "1,000", "yes")]
    streaming = run_all.rows_serve_vs_vllm({"mode": "streaming", "sizes": {"25m": {
        "ours_tok_s": 900.0, "vllm_tok_s": 1000.0, "ratio": 0.9, "ours_tpot_ms": 7.0, "vllm_tpot_ms": 6.0}}})
    assert [r.met for r in streaming] == ["**no**", "**no**"]
    assert "time per output token" in streaming[1].figure


def test_readme_table_is_replaced_between_markers_keeping_rows_not_rerun(run_all: Any) -> None:
    Row = run_all.Row
    old = [Row("serve_throughput", "a | b", "1", date="2026-01-01"), Row("trainer_step", "old", "9")]
    text = f"# Benchmarks\n\nintro\n\n{run_all.BEGIN}\n{run_all.table(old)}\n{run_all.END}\n\n## rest\n"
    new = run_all.update_readme(text, [Row("trainer_step", "new", "1")], {"trainer_step"})
    block = new.split(run_all.BEGIN)[1].split(run_all.END)[0]
    rows = run_all.parse_table(block)
    assert [(r.benchmark, r.figure) for r in rows] == [("serve_throughput", "a | b"), ("trainer_step", "new")]
    assert new.startswith("# Benchmarks\n\nintro\n\n") and new.endswith("\n\n## rest\n")
    assert run_all.update_readme(new, [Row("trainer_step", "new", "1")], {"trainer_step"}) == new


def test_a_ratio_that_moved_and_a_target_that_flipped_are_named_against_the_recorded_table(run_all: Any) -> None:
    """Issue 53: the recorded trainer_step ratio was 0.466 and a later run's 0.69 went unnoticed."""
    recorded = run_all.rows_trainer_step({**TRAINER_STEP, "ratio": 0.466, "rounds": [{"ratio": 0.46}, {"ratio": 0.47}]})
    for r in recorded:
        r.date = "2026-11-27"
    now = run_all.rows_trainer_step({**TRAINER_STEP, "ratio": 0.69, "rounds": [{"ratio": 0.7}, {"ratio": 0.68}]})
    recorded[0].met = "yes"  # 0.466 <= 0.5
    moved, flipped = run_all.compare_with_recorded(recorded, now)
    assert len(moved) == 1 and "ratio 0.466 (2026-11-27) -> 0.690 (+48%)" in moved[0]  # MFU rows have no ratio
    assert len(flipped) == 1 and flipped[0].startswith("trainer_step: s per GRPO step vs TRL")
    same = run_all.rows_trainer_step({**TRAINER_STEP, "ratio": 0.48})
    assert run_all.compare_with_recorded(recorded, same) == ([], [])  # within 10%, still met
    other_size = run_all.rows_trainer_step({**TRAINER_STEP, "ratio": 0.9, "model": {"params": 25e6}})
    assert run_all.compare_with_recorded(recorded, other_size) == ([], [])  # another size is another row


def test_a_readme_without_markers_gets_the_section_after_its_first_paragraph(run_all: Any) -> None:
    text = "# Benchmarks\n\nRun them quietly.\n\n## rollout_engine.py\n\ndetails\n"
    new = run_all.update_readme(text, [run_all.Row("learning", "reward", "0 → 1")], {"learning"})
    assert new.index("Run them quietly.") < new.index(run_all.BEGIN) < new.index("## rollout_engine.py")
    assert "| learning | reward | 0 → 1 |" in new


def test_examples_learn_gives_one_row_per_config_with_every_seed(run_all: Any) -> None:
    run = {"target": "first10 <= 0.2 and last10% >= 0.8", "seconds": 40.0}
    out = {"runs": [{**run, "config": "mix", "seed": 0, "first": 0.04, "last": 0.997, "met": True},
                    {**run, "config": "mix", "seed": 1, "first": 0.03, "last": 0.22, "met": False, "seconds": 71.6},
                    {**run, "config": "dapo", "seed": 0, "first": 0.03, "last": 0.99, "met": True}]}
    rows = run_all.rows_examples_learn(out)
    assert [r.benchmark for r in rows] == ["examples_learn", "examples_learn"]
    assert "mix.toml, seed 0, 1" in rows[0].figure and "slowest run 72 s" in rows[0].figure
    assert (rows[0].ours, rows[0].target, rows[0].met) == (
        "0.04 → 1.00 / 0.03 → 0.22", "first10 <= 0.2 and last10% >= 0.8", "**no** (1/2)")
    assert rows[1].met == "yes (1/1)"
    assert "examples_learn" in {b.name for b in run_all.BENCHES}


# -- --learning: every learning claim, resumable ----------------------------------------------------
@pytest.fixture(scope="module")
def claims(benchmark_script: Callable[[str], Any]) -> Any:
    return benchmark_script("_learning_claims")


REAL_AGENT = {"config": "examples/configs/calculator_smollm2.toml", "program": False, "seed": 1,
              "success_before": 0.01, "success_after_warmup": 0.275, "success_after": 1.0, "rl_gain": 0.725,
              "tool_call_rate": 1.0, "valid_call_rate": 1.0, "turns_mean": 2.0, "truncated_share": 0.0,
              "train_s": 2455.0, "targets_met": True}


def fake_unit(claims: Any, tmp_path: Path, name: str, out: dict[str, Any] | None, **kw: Any) -> Any:
    """A real child process standing in for a benchmark: it counts its runs, prints progress, then its JSON."""
    script = tmp_path / f"{name}.py"
    body = f"print(json.dumps({out!r}))" if out is not None else "raise SystemExit(2)"
    script.write_text(f"import json, pathlib\np = pathlib.Path({str(tmp_path / (name + '.runs'))!r})\n"
                      f"p.write_text(str(int(p.read_text() or 0) + 1) if p.exists() else '1')\n"
                      f"print('training...', flush=True)\n{body}\n")
    return claims.Unit(name, str(script), (), kw.pop("rows", claims.real_agent_rows), kw.pop("timeout_s", 60), **kw)


def runs(tmp_path: Path, name: str) -> int:
    path = tmp_path / f"{name}.runs"
    return int(path.read_text()) if path.exists() else 0


def test_learning_units_run_once_and_are_reused_until_fresh(claims: Any, tmp_path: Path) -> None:
    units = [fake_unit(claims, tmp_path, "agent", REAL_AGENT), fake_unit(claims, tmp_path, "broken", None)]
    echoed: list[str] = []
    rows, summary = claims.run_learning(tmp_path / "results", [], False, echoed.append, chosen=units)
    assert [(r.claim, r.config, r.seed, r.met) for r in rows] == [
        ("a real model learns a tool", "calculator_smollm2.toml", "1", True), ("broken", "—", "—", None)]
    assert "0.010 → 0.275 (warm-up) → 1.000; RL +0.725" in rows[0].figure and rows[0].seconds == 2455.0
    assert rows[1].figure.startswith("NOT RUN: exit 2, no JSON line")
    assert summary["met"] == "1/2" and summary["unknown"] == 1 and summary["ran"] == ["agent", "broken"]
    assert "[agent] training..." in echoed  # a long unit's progress is shown as it comes
    # a second sitting reuses the finished unit and retries the failed one
    _, again = claims.run_learning(tmp_path / "results", [], False, echoed.append, chosen=units)
    assert (runs(tmp_path, "agent"), runs(tmp_path, "broken")) == (1, 2)
    assert again["reused"] == ["agent"] and again["ran"] == ["broken"]
    claims.run_learning(tmp_path / "results", ["agent"], True, echoed.append, chosen=units)
    assert (runs(tmp_path, "agent"), runs(tmp_path, "broken")) == (2, 2)
    with pytest.raises(SystemExit, match=r"unknown unit.*nope.*choose from agent, broken"):
        claims.run_learning(tmp_path / "results", ["nope"], False, echoed.append, chosen=units)


def test_a_partial_sitting_writes_the_whole_table(claims: Any, tmp_path: Path) -> None:
    """``--only`` runs one unit, yet the table still shows every other unit: kept, or not run yet."""
    units = [fake_unit(claims, tmp_path, "agent", REAL_AGENT), fake_unit(claims, tmp_path, "later", REAL_AGENT)]
    claims.run_learning(tmp_path / "results", ["agent"], False, lambda _: None, chosen=units)
    rows, summary = claims.run_learning(tmp_path / "results", ["agent"], False, lambda _: None, chosen=units)
    assert (runs(tmp_path, "agent"), runs(tmp_path, "later")) == (1, 0)
    assert summary["reused"] == ["agent"] and summary["ran"] == [] and summary["not_run_yet"] == ["later"]
    assert summary["unknown"] == 0  # not a failure: the exit status is this sitting's
    assert [r.claim for r in rows] == ["a real model learns a tool", "later"]
    assert rows[1].met is None and rows[1].figure.startswith("not run yet")
    assert "--only later" in rows[1].figure
    # once the other unit has run, a sitting on the first alone shows its kept result
    claims.run_learning(tmp_path / "results", ["later"], False, lambda _: None, chosen=units)
    rows, summary = claims.run_learning(tmp_path / "results", ["agent"], False, lambda _: None, chosen=units)
    assert [r.met for r in rows] == [True, True] and summary["met"] == "2/2"
    assert runs(tmp_path, "later") == 1


def test_rows_carried_in_a_record_show_until_the_unit_reruns(claims: Any, tmp_path: Path) -> None:
    """A record may carry its rows alone (a sitting whose JSON was lost): they show, and --only reruns it."""
    unit = fake_unit(claims, tmp_path, "agent", REAL_AGENT)
    carried = claims.ClaimRow("a real model learns a tool", "calculator_smollm2.toml", "1", "t", "success 0.9",
                              True, "2026-12-01", 60.0)
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "agent.json").write_text(json.dumps({"unit": "agent", "out": None, "error": None,
                                                                   "rows": [dataclasses.asdict(carried)]}))
    rows, summary = claims.run_learning(tmp_path / "results", ["other"], False, lambda _: None,
                                        chosen=[unit, fake_unit(claims, tmp_path, "other", REAL_AGENT)])
    assert rows[0] == carried and runs(tmp_path, "agent") == 0 and summary["not_run_yet"] == []
    rows, _ = claims.run_learning(tmp_path / "results", ["agent"], False, lambda _: None, chosen=[unit])
    assert runs(tmp_path, "agent") == 1 and "0.010 → 0.275 (warm-up) → 1.000" in rows[0].figure


def test_the_learning_records_are_kept_in_the_repository(claims: Any) -> None:
    """Each session starts from a fresh clone: results kept under runs/ (ignored) were lost with the machine."""
    kept = claims.HERE / "learning"
    assert any(kept.glob("*.json")), "benchmarks/learning/ holds the learning units' records"
    ignored = subprocess.run(["git", "check-ignore", "-q", str(kept / "real_model_seed0.json")], cwd=claims.ROOT)
    if ignored.returncode == 128:
        pytest.skip("not a git checkout")
    assert ignored.returncode == 1  # tracked, not ignored


def test_a_unit_whose_extra_is_missing_or_that_hangs_is_a_row_saying_so(claims: Any, tmp_path: Path) -> None:
    missing = fake_unit(claims, tmp_path, "needs", REAL_AGENT, needs="no_such_module_for_this_test")
    hang = tmp_path / "hang.py"
    hang.write_text("import time\ntime.sleep(60)\n")
    hung = claims.Unit("hung", str(hang), (), claims.real_agent_rows, 1.5)
    rows, _ = claims.run_learning(tmp_path / "results", [], False, lambda _: None, chosen=[missing, hung])
    assert runs(tmp_path, "needs") == 0
    assert "skipped: `import no_such_module_for_this_test` fails" in rows[0].figure
    assert "timed out after 2 s" in rows[1].figure


def test_vllm_rows_compare_each_seed_with_the_embedded_run(claims: Any) -> None:
    out = {"runs": [{"shape": "h96", "path": p, "seed": s, "reward_last": r, "wall_s": 100.0}
                    for p, s, r in [("embedded", 0, 0.99), ("vllm", 0, 0.95), ("embedded", 1, 0.98),
                                    ("vllm", 1, 0.42)]]}
    rows = claims.vllm_rows(out)
    assert [(r.seed, r.met) for r in rows] == [("0", True), ("1", False)]
    assert "gap 0.560" in rows[1].figure


def test_every_unit_is_named_once_and_its_flags_are_its_script_s(claims: Any) -> None:
    import subprocess
    import sys

    units = claims.units()
    assert len({u.name for u in units}) == len(units)
    assert all(u.script_path.is_file() for u in units)
    for script in ("examples_learn", "real_model", "real_agent", "vllm_train"):  # the ones with argparse
        usage = subprocess.run([sys.executable, str(claims.HERE / f"{script}.py"), "--help"], capture_output=True,
                               text=True, cwd=str(claims.ROOT), timeout=120).stdout
        own = [u.args[:u.args.index("--")] if "--" in u.args else u.args for u in units if u.script == script]
        flags = {a for args in own for a in args if a.startswith("--")}  # after "--": vf-train's own flags
        assert flags and all(f in usage for f in flags), (script, flags - {f for f in flags if f in usage})
