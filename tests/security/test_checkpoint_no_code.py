"""A checkpoint is data: `vf-train --resume` never runs code from a state.pt it finds.

Before the fix `load_checkpoint` unpickled with ``weights_only=False``, so anyone who could
write a run directory, or hand over a checkpoint, ran code in the trainer on resume.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from trainers.grpo.run.checkpoint import load_checkpoint, save_checkpoint  # noqa: E402
from verifiers.errors import ConfigError  # noqa: E402
from verifiers.types import RolloutResult  # noqa: E402


class _Planted:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # what an attacker's pickle does on load
        return (os.system, (f"touch {self.marker}",))


def test_a_checkpoint_with_pickled_code_is_refused_and_nothing_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    step = tmp_path / "checkpoints" / "step_0000003"
    step.mkdir(parents=True)
    torch.save({"step": 3, "model": {"w": torch.zeros(2)}, "store": _Planted(marker)}, step / "state.pt")
    with pytest.raises(ConfigError, match="holds pickled Python objects, which could run code"):
        load_checkpoint(step)
    assert not marker.exists()


def test_a_saved_checkpoint_is_tensors_and_plain_data_and_round_trips(tmp_path: Path) -> None:
    rollout = RolloutResult(example_id=4, rollout_index=1, prompt=[{"role": "user", "content": "hi"}],
                            completion=[{"role": "assistant", "content": "yo"}], answer="yo", reward=0.5)
    payload = {"step": 2, "model": {"w": torch.arange(3.0)}, "rng": {"python": (3, (1, 2, 3), None)},
               "store": {"groups": [{"cells": {"result": {0: rollout}, "reward": {0: 0.5}}}]}}
    path = save_checkpoint(tmp_path / "checkpoints", 2, payload, keep=2)
    torch.load(path / "state.pt", weights_only=True)  # no class in it
    back = load_checkpoint(path)
    assert back["store"]["groups"][0]["cells"]["result"][0] == rollout
    assert torch.equal(back["model"]["w"], torch.arange(3.0))
    assert back["rng"]["python"] == (3, (1, 2, 3), None)
