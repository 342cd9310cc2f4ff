"""`benchmarks/train_memory.py`: a training run's peak split into its parts, on the Quickstart's tiny model.

The real model's figures (docs/models.md) take minutes; here a three-step Quickstart run in a
subprocess checks that the parts are what their names say: the weights are the parameters' bytes,
AdamW's state is two moments per trained parameter, every step's metrics carry the memory, and the
parts add up to the peak the process reports.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the current resident size is read from /proc")
def test_the_peak_splits_into_libraries_weights_engine_optimizer_and_learner_step() -> None:
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "train_memory.py"), "--config",
                          str(ROOT / "examples" / "configs" / "quickstart.toml"), "--steps", "3"],
                         capture_output=True, text=True, timeout=600, cwd=ROOT, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(got["steps"]) == 3
    assert all(s["memory/rss_gb"] > 0 and s["memory/peak_rss_gb"] >= s["memory/rss_gb"] for s in got["steps"])
    assert got["weights_gb"] > 0
    assert got["optimizer_state_gb"] == pytest.approx(2 * got["gradients_gb"], rel=0.01)  # exp_avg, exp_avg_sq
    assert got["gradients_gb"] <= got["weights_gb"] + 1e-9
    assert 0.1 < got["libraries_gb"] < got["peak_rss_gb"]  # torch alone is a few hundred MB
    parts = ("libraries_gb", "setup_gb", "first_batch_gb", "optimizer_state_gb", "learner_step_peak_gb",
             "unexplained_gb")
    assert sum(got[k] for k in parts) == pytest.approx(got["peak_rss_gb"], abs=0.01)
    assert got["learner_step_peak_gb"] > 0  # the step made tensors the counter saw
