"""`benchmarks/seeded_sampling.py`: another commit's sampler against this tree's, the same tokens checked.

A run against ``HEAD`` compares the committed sampler with the working tree's (the same code on a
clean checkout): it must load the other version as its own module, time both, and find them
picking the same tokens, which is what a reader of its speedups relies on.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs a git checkout")
def test_the_benchmark_compares_a_commits_sampler_with_this_trees() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "seeded_sampling.py"), "--ref", "HEAD",
                           "--vocab", "3000", "--rows", "2", "40", "--rounds", "1", "--repeats", "2"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["ref"] == "HEAD" and out["same_tokens"] is True
    assert [(c["vocab"], c["rows"]) for c in out["cases"]] == [(3000, 2), (3000, 40)]
    assert all(c["ref_ms"] > 0 and c["ours_ms"] > 0 for c in out["cases"])
