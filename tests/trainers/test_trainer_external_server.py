"""Training against a separate server (``base_url``): weights reach it by disk reload."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")


def test_external_server_serves_the_trained_weights(tmp_path: Path, train_config: Any, run_training: Any,
                                                     base_model_dir: Path) -> None:
    from verifiers.inference.engine import InferenceEngine
    from verifiers.inference.server.runner import EmbeddedServer

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


def test_an_external_server_gets_the_warmed_up_weights_before_the_first_rollout(
        tmp_path: Path, train_config: Any, run_training: Any, base_model_dir: Path) -> None:
    """The SFT warm-up changes the weights without a step: they must still reach the server first."""
    from trainers.grpo.trainer import GRPOTrainer
    from verifiers.inference.engine import InferenceEngine
    from verifiers.inference.server.runner import EmbeddedServer

    engine = InferenceEngine.from_pretrained(base_model_dir)
    before = {k: v.clone() for k, v in engine.model.state_dict().items()}
    seen: dict[str, Any] = {}

    class Watching(GRPOTrainer):
        def _sft_warmup(self) -> None:
            super()._sft_warmup()
            seen["served"] = {k: v.clone() for k, v in engine.model.state_dict().items()}
            seen["trained"] = {k: v.detach().clone() for k, v in
                               self.accelerator.unwrap_model(self.model).state_dict().items()}

    expert = Path(__file__).resolve().parents[2] / "examples" / "data" / "letter_repeat_expert.jsonl"
    with EmbeddedServer(engine, ["policy"]) as server:
        cfg = train_config(tmp_path / "run", base_url=server.base_url, max_steps=1, expert_data=str(expert),
                           sft_warmup_steps=5, sft_warmup_batch_size=4, sft_warmup_learning_rate=1e-2)
        run = run_training(cfg, trainer_cls=Watching)
    assert any(not torch.equal(seen["trained"][k], before[k]) for k in before)  # the warm-up trained
    for k, v in seen["trained"].items():
        torch.testing.assert_close(seen["served"][k], v)  # and the server had those weights before step 1
    assert len(run.rows) == 1 and run.rows[0]["rollouts/errors"] == 0


def test_a_model_name_the_server_does_not_serve_is_named_before_any_rollout(
        tmp_path: Path, train_config: Any, run_training: Any, base_model_dir: Path) -> None:
    from verifiers.errors import ConfigError
    from verifiers.inference.engine import InferenceEngine
    from verifiers.inference.server.runner import EmbeddedServer

    engine = InferenceEngine.from_pretrained(base_model_dir)
    with EmbeddedServer(engine, ["my-model"]) as server:
        cfg = train_config(tmp_path / "run", base_url=server.base_url, max_steps=1)
        assert cfg.server_model_name == "policy"  # the default
        with pytest.raises(ConfigError) as err:
            run_training(cfg)
    message = str(err.value)
    assert "model 'policy' is not served at" in message and "the server lists: my-model" in message
    assert "server_model_name" in message and "token ids" not in message
    assert engine.weight_version == 0  # refused before anything reached the server
