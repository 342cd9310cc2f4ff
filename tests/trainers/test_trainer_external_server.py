"""Training against a separate server (``base_url``): weights reach it by disk reload."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")


def test_external_server_serves_the_trained_weights(tmp_path: Path, train_config: Any, run_training: Any,
                                                     base_model_dir: Path) -> None:
    from verifiers.inference.engine import InferenceEngine
    from verifiers.inference.runner import EmbeddedServer

    engine = InferenceEngine.from_pretrained(base_model_dir)
    with EmbeddedServer(engine, ["policy"]) as server:
        cfg = train_config(tmp_path / "run", base_url=server.base_url, max_steps=2)
        run = run_training(cfg)
        # Every step pushed the learner's weights: the server's model now equals the trained one.
        trained = run.trainer.accelerator.unwrap_model(run.trainer.model).state_dict()
        served = engine.model.state_dict()
        assert served.keys() == trained.keys()
        for k in trained:
            torch.testing.assert_close(served[k], trained[k])
        assert engine.weight_version == 2  # one reload per step
    assert [r["policy_version"] for r in run.rows] == [1.0, 2.0]
    assert all(r["rollouts/errors"] == 0 for r in run.rows)
