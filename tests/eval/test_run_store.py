"""The run directory: layout, atomic metadata, append-per-group, torn lines, resume compaction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from verifiers.errors import ConfigError
from verifiers.eval.run_store import (
    RunMetadata,
    RunStore,
    find_resumable_run,
    model_dir_name,
    new_run_id,
    read_metadata,
    read_results,
    redact_headers,
    scan_results,
)
from verifiers.types import RolloutError, RolloutResult


def meta(**kw: object) -> RunMetadata:
    base: dict[str, object] = {
        "run_id": "",
        "env_id": "toy-env",
        "model": "org/model",
        "num_examples": 3,
        "rollouts_per_example": 2,
        "example_ids": [0, 1, 2],
        "sampling_args": {"temperature": 0.5},
    }
    base.update(kw)
    return RunMetadata.model_validate(base)


def result(eid: int, idx: int, *, reward: float = 1.0, error: str | None = None) -> RolloutResult:
    return RolloutResult(
        example_id=eid,
        group_id=eid,
        rollout_index=idx,
        prompt=[{"role": "user", "content": f"q{eid}"}],
        completion=[{"role": "assistant", "content": "a"}],
        reward=reward,
        metrics={"m": reward},
        error=RolloutError(type=error, message="boom") if error else None,
        stop_reason="error" if error else "completed",
    )


def test_layout_and_run_ids_sort_by_time(tmp_path: Path) -> None:
    store = RunStore.create(tmp_path, meta())
    store.close()
    assert store.run_dir.parent == tmp_path / "toy-env--org--model"
    assert model_dir_name("e", "a/b/c") == "e--a--b--c"
    ids = [new_run_id() for _ in range(5)]
    assert ids == sorted(ids) and len(set(ids)) == 5


def test_groups_are_readable_while_the_run_is_still_open(tmp_path: Path) -> None:
    store = RunStore.create(tmp_path, meta())
    store.append_group([result(0, 0), result(0, 1)])
    # Another process (a viewer, a resume after kill -9) sees the group before close.
    assert [(r.example_id, r.rollout_index) for r in read_results(store.run_dir)] == [(0, 0), (0, 1)]
    store.append_group([result(1, 0, reward=0.0, error="ServerError"), result(1, 1, reward=0.0)])
    m = store.finish("complete")
    on_disk = read_metadata(store.run_dir)
    assert on_disk is not None and on_disk == m
    assert on_disk.counts.model_dump() == {"expected": 6, "saved": 4, "errored": 1}
    assert on_disk.errors_by_type == {"ServerError": 1}
    assert on_disk.avg_reward == pytest.approx(0.5)
    assert on_disk.avg_metrics == {"m": pytest.approx(0.5)}
    assert on_disk.is_incomplete  # an errored rollout and a missing example remain
    assert sorted(p.name for p in store.run_dir.iterdir()) == [
        "metadata.json",
        "results.jsonl",
    ]  # no temp files


def test_scan_tolerates_a_torn_last_line_and_counts_damage(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    good = [
        result(0, 0).model_dump_json(),
        result(0, 1).model_dump_json(),
        result(0, 0, reward=0.3).model_dump_json(),
    ]
    path.write_text(good[0] + "\nnot json\n" + good[1] + "\n" + good[2] + "\n" + good[1][:40])
    scanned = scan_results(path)
    assert scanned.torn_tail and scanned.bad_lines == 1 and scanned.duplicates == 1
    assert set(scanned.rows) == {(0, 0), (0, 1)}
    assert json.loads(scanned.rows[(0, 0)])["reward"] == 0.3  # the later row of a key wins
    # A complete last line without its newline is not torn.
    path.write_text(good[0])
    assert not scan_results(path).torn_tail and set(scan_results(path).rows) == {(0, 0)}


def test_resume_compacts_and_returns_exactly_the_missing_and_errored(tmp_path: Path) -> None:
    store = RunStore.create(tmp_path, meta())
    store.append_group([result(0, 0), result(0, 1, error="RateLimitError")])
    store.append_group([result(1, 0), result(1, 1)])
    store.close()  # status stays "running", as after kill -9
    with open(store.run_dir / "results.jsonl", "a") as f:
        f.write(result(2, 0).model_dump_json()[:50])  # torn write

    resumed, todo = RunStore.resume(store.run_dir, meta())
    assert todo == {(0, 1), (2, 0), (2, 1)}
    lines = (store.run_dir / "results.jsonl").read_text().splitlines()
    assert len(lines) == 3 and all(json.loads(line)["error"] is None for line in lines)
    resumed.append_group([result(0, 1)])
    resumed.append_group([result(2, 0), result(2, 1)])
    m = resumed.finish("complete")
    keys = [(r.example_id, r.rollout_index) for r in read_results(store.run_dir)]
    assert sorted(keys) == [(e, i) for e in range(3) for i in range(2)]
    assert m.resumes == 1 and m.counts.saved == 6 and m.counts.errored == 0 and not m.is_incomplete


def test_resume_reruns_whole_groups_when_asked(tmp_path: Path) -> None:
    store = RunStore.create(tmp_path, meta())
    store.append_group([result(0, 0), result(0, 1, error="ModelTimeoutError")])
    store.append_group([result(1, 0), result(1, 1)])
    store.close()
    _, todo = RunStore.resume(store.run_dir, meta(), rerun_whole_groups=True)
    assert todo == {(0, 0), (0, 1), (2, 0), (2, 1)}
    assert {(r.example_id, r.rollout_index) for r in read_results(store.run_dir)} == {(1, 0), (1, 1)}


def test_resume_refuses_a_different_configuration(tmp_path: Path) -> None:
    store = RunStore.create(tmp_path, meta())
    store.close()
    with pytest.raises(ConfigError, match="sampling_args"):
        RunStore.resume(store.run_dir, meta(sampling_args={"temperature": 1.0}))
    with pytest.raises(ConfigError, match="example ids"):
        RunStore.resume(store.run_dir, meta(example_ids=[5, 6, 7]))
    with pytest.raises(ConfigError, match="not a run directory"):
        RunStore.resume(tmp_path, meta())


def test_find_resumable_run_picks_the_latest_incomplete_match(tmp_path: Path) -> None:
    older = RunStore.create(tmp_path, meta())
    older.finish("interrupted")
    newer = RunStore.create(tmp_path, meta())
    newer.finish("interrupted")
    other_args = RunStore.create(tmp_path, meta(env_args={"x": 1}))
    other_args.finish("interrupted")
    assert find_resumable_run(tmp_path, meta()) == newer.run_dir
    assert find_resumable_run(tmp_path, meta(env_args={"x": 1})) == other_args.run_dir
    assert find_resumable_run(tmp_path, meta(num_examples=9)) is None

    done = RunStore.create(tmp_path, meta(num_examples=1, example_ids=[0], rollouts_per_example=1))
    done.append_group([result(0, 0)])
    done.finish("complete")
    assert find_resumable_run(tmp_path, meta(num_examples=1, example_ids=[0], rollouts_per_example=1)) is None


def test_secrets_in_headers_are_redacted() -> None:
    red = redact_headers({"Authorization": "Bearer sk-1", "X-Api-Key": "k", "X-Team": "blue", "Cookie": "c"})
    assert red == {
        "Authorization": "<redacted>",
        "X-Api-Key": "<redacted>",
        "X-Team": "blue",
        "Cookie": "<redacted>",
    }
