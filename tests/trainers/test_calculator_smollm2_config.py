"""examples/configs/calculator_smollm2.toml and its agent-program twin load, and their pieces agree.

Cheap checks only (no model, no training; `benchmarks/real_agent.py --train [--program]` runs
them): both validate as `TrainConfig`s on the registry model, share the recipe, warm up on at most
64 expert episodes the environment itself generates from its training split, and evaluate on a
held-out split that shares no problem with training.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainers.grpo.algo.algorithms import get_algorithm
from trainers.grpo.config import load_config, validate_run

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "configs" / "calculator_smollm2.toml"
PROGRAM = ROOT / "examples" / "configs" / "calculator_program_smollm2.toml"
RECIPE = ("expert_data", "sft_warmup_steps", "sft_warmup_tokens", "sft_warmup_batch_size", "sft_warmup_learning_rate",
          "algorithm", "prompts_per_step", "num_generations", "max_steps", "max_tokens", "temperature",
          "learning_rate", "seed")


def test_both_configs_validate_and_share_the_recipe() -> None:
    env_cfg, program_cfg = load_config(CONFIG), load_config(PROGRAM)
    for cfg in (env_cfg, program_cfg):
        validate_run(cfg, get_algorithm(cfg.algorithm, **cfg.algorithm_overrides))
        assert cfg.model == "smollm2-135m-instruct" and cfg.env_id == "calculator"
        assert cfg.chat_template is None  # the registry's tool template renders the tool
    assert {k: getattr(env_cfg, k) for k in RECIPE} == {k: getattr(program_cfg, k) for k in RECIPE}
    assert program_cfg.env_args == {**env_cfg.env_args, "program": True}


def test_the_warmup_is_at_most_64_episodes_from_the_training_split(monkeypatch: pytest.MonkeyPatch) -> None:
    from verifiers.envs.loader import load_environment

    cfg = load_config(CONFIG)
    episodes = [json.loads(line) for line in Path(cfg.expert_data or "").read_text().splitlines()]
    assert 0 < len(episodes) <= 64
    monkeypatch.chdir(ROOT)
    env = load_environment(cfg.env_id, **cfg.env_args)
    assert env.dataset is not None and env.eval_dataset is not None
    train = {r["prompt"][-1]["content"] for r in env.dataset.rows}
    held_out = {r["prompt"][-1]["content"] for r in env.eval_dataset.rows}
    assert not train & held_out
    asked = {e["messages"][1]["content"] for e in episodes}
    assert asked <= train and not asked & held_out
