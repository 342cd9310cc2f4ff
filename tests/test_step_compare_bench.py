"""`benchmarks/step_compare.py`: two commits' trainer steps alternated in one run (issue 53).

The measurement itself runs `trainer_step.py` (benchmarks/README.md); here the worktree handling is
real (a detached worktree of HEAD, removed afterwards) and each run's figures are stood in for.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="module")
def bench(benchmark_script: Callable[[str], Any]) -> Any:
    return benchmark_script("step_compare")


def test_refs_alternate_in_their_own_worktrees_and_are_compared_with_the_first(
        bench: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    if not (bench.ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    seen: list[Path] = []

    def fake_measure(tree: Path, passthrough: list[str], timeout: float) -> dict[str, Any]:
        assert passthrough == ["--size", "25m"]
        assert (tree / "benchmarks" / "trainer_step.py").is_file()  # the commit's own benchmark
        seen.append(tree)
        slow = tree != bench.ROOT
        return {"ours_s_per_step": 0.3 if slow else 0.2, "ours_phases_s": {"generation": 0.1, "fwd_bwd": 0.1},
                "peak_tflops": 0.2, "learner_mfu": 0.25}

    monkeypatch.setattr(bench, "measure", fake_measure)
    assert bench.main(["HEAD", "--rounds", "2", "--", "--size", "25m"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    worktree = seen[0]
    assert seen == [worktree, bench.ROOT, worktree, bench.ROOT]  # A B A B on one machine
    assert out["refs"]["HEAD"]["s_per_step"] == 0.3 and out["refs"]["."]["vs_first"] == pytest.approx(0.667, abs=1e-3)
    listed = subprocess.run(["git", "worktree", "list"], cwd=bench.ROOT, capture_output=True, text=True).stdout
    assert str(worktree) not in listed and not worktree.exists()  # removed at the end
