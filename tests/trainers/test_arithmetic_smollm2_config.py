"""examples/configs/arithmetic_smollm2.toml (GRPO of SmolLM2-135M-Instruct on arithmetic) loads and is valid.

Cheap checks only (no model, no training): the config validates as a `TrainConfig` with its
algorithm, names the registry model, and its environment builds with disjoint training and
evaluation splits, the system prompt it sets included. `benchmarks/real_model.py --train` runs it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainers.grpo.algo.algorithms import get_algorithm
from trainers.grpo.config import load_config, validate_run

CONFIG = Path(__file__).resolve().parents[2] / "examples" / "configs" / "arithmetic_smollm2.toml"


def test_config_loads_and_validates() -> None:
    cfg = load_config(CONFIG)
    validate_run(cfg, get_algorithm(cfg.algorithm, **cfg.algorithm_overrides))
    assert cfg.model == "smollm2-135m-instruct"
    assert cfg.env_id == "arithmetic" and cfg.env_args["max_operand"] == 20
    assert cfg.temperature == 1.0 and cfg.num_generations > 1
    assert cfg.rows_per_step == cfg.prompts_per_step * cfg.num_generations


def test_model_can_be_overridden_on_the_command_line(tmp_path: Path) -> None:
    cfg = load_config(CONFIG, ["--model", str(tmp_path), "--seed", "2"])
    assert cfg.model == str(tmp_path) and cfg.seed == 2


def test_its_environment_has_disjoint_splits_and_the_configured_prompt(monkeypatch: pytest.MonkeyPatch) -> None:
    from verifiers.envs.loader import load_environment

    cfg = load_config(CONFIG)
    monkeypatch.chdir(CONFIG.parents[2])  # the shipped environment loads from ./environments if not installed
    env = load_environment(cfg.env_id, **cfg.env_args)
    assert env.dataset is not None and env.eval_dataset is not None
    train = {json.dumps(r["prompt"]) for r in env.dataset.rows}
    evaluation = [json.dumps(r["prompt"]) for r in env.eval_dataset.rows]
    assert len(evaluation) == 100 and not train.intersection(evaluation)
    system = env.eval_dataset.rows[0]["prompt"][0]
    assert system["role"] == "system" and system["content"] == cfg.env_args.get("system_prompt", system["content"])
