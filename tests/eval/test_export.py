"""Reading run directories (load_run) and exporting them as HF datasets (save_dataset)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path
from types import ModuleType

import datasets
import pytest

from verifiers.errors import ConfigError
from verifiers.eval.export import (
    find_runs,
    load_run,
    metadata_from_dataset,
    results_from_dataset,
    save_dataset,
    to_dataset,
)


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


@pytest.fixture
def run_copy(real_run, tmp_path: Path) -> Path:
    """A private copy of the run directory, for tests that damage it."""
    dst = tmp_path / "evals" / real_run.run_dir.parent.name / real_run.run_dir.name
    shutil.copytree(real_run.run_dir, dst)
    return dst


def dumps(results) -> list[dict]:
    return [r.model_dump(mode="json") for r in results]


def test_save_dataset_round_trips_through_load_from_disk(real_run, tmp_path: Path) -> None:
    out = save_dataset(real_run.run_dir, tmp_path / "ds")
    assert out == tmp_path / "ds"
    ds = datasets.load_from_disk(str(out))
    assert len(ds) == 12
    assert ds.features["reward"].dtype == "float64"
    assert ds.features["example_id"].dtype == "int64"
    assert sorted(ds["reward"]) == sorted(r.reward for r in real_run.results)
    # Every field comes back exactly, tool calls and errors included.
    assert dumps(results_from_dataset(ds)) == dumps(load_run(real_run.run_dir).results)
    assert metadata_from_dataset(ds) == json.loads((real_run.run_dir / "metadata.json").read_text())
    # Structured columns are JSON; the error column is null for rollouts that did not fail.
    errored = ds.filter(lambda row: row["error"] is not None)
    assert len(errored) == sum(r.error is not None for r in real_run.results) == 2
    assert {json.loads(e)["type"] for e in errored["error"]} == {"ServerError"}
    tool_rows = [json.loads(c) for c in ds["completion"] if '"role": "tool"' in c]
    assert tool_rows and all(isinstance(m, dict) and "role" in m for c in tool_rows for m in c)


def test_to_dataset_of_an_empty_run_keeps_the_schema(run_copy: Path) -> None:
    (run_copy / "results.jsonl").write_text("")
    ds = to_dataset(run_copy)
    assert len(ds) == 0
    assert {"prompt", "completion", "reward", "error", "metrics", "stop_reason"} <= set(ds.column_names)


def test_save_dataset_refuses_the_run_dir_itself(real_run) -> None:
    with pytest.raises(ConfigError, match="run directory itself"):
        save_dataset(real_run.run_dir, real_run.run_dir)


def test_load_run_tolerates_a_torn_last_line(run_copy: Path) -> None:
    before = load_run(run_copy)
    line = (run_copy / "results.jsonl").read_text().splitlines()[0]
    with (run_copy / "results.jsonl").open("a") as fh:
        fh.write(line[: len(line) // 2])  # a write cut short by kill -9
    after = load_run(run_copy)
    assert after.skipped_lines == 1
    assert dumps(after.results) == dumps(before.results)


def test_load_run_keeps_the_latest_row_of_a_rollout(run_copy: Path) -> None:
    first = json.loads((run_copy / "results.jsonl").read_text().splitlines()[0])
    redo = dict(first, reward=0.75, error=None, stop_reason="completed")
    with (run_copy / "results.jsonl").open("a") as fh:
        fh.write(json.dumps(redo) + "\n")
    run = load_run(run_copy)
    assert run.superseded == 1
    assert len(run.results) == 12
    key = (first["example_id"], first["rollout_index"])
    (latest,) = [r for r in run.results if (r.example_id, r.rollout_index) == key]
    assert latest.reward == 0.75 and latest.error is None


def test_run_without_metadata_is_named_after_its_directory(run_copy: Path) -> None:
    (run_copy / "metadata.json").unlink()
    run = load_run(run_copy)
    assert (run.env_id, run.model, run.run_id) == (fx.ENV_ID, fx.MODEL, run_copy.name)
    assert run.metadata == {} and len(run.results) == 12


def test_not_a_run_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_run(tmp_path / "nope")
    with pytest.raises(ConfigError, match=r"neither results\.jsonl nor metadata\.json"):
        load_run(tmp_path)


def test_find_runs_walks_the_output_layout(real_run, run_copy: Path) -> None:
    evals = real_run.run_dir.parents[1]
    assert find_runs(evals) == [real_run.run_dir]
    assert find_runs(evals.parent) == [real_run.run_dir]  # <output_dir> works too
    assert find_runs(run_copy) == [run_copy]
    assert find_runs(run_copy / "missing") == []
