"""The training config: TOML plus command-line overrides, and errors that name the problem."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainers.grpo.config import TrainConfig, load_config, parse_overrides
from verifiers.errors import ConfigError

QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "configs" / "quickstart.toml"

TOML = """
model = "tiny"
env_id = "letter-repeat"
learning_rate = 3e-3
prompts_per_step = 4
num_generations = 4

[tiny_model]
hidden_size = 48
num_hidden_layers = 3

[env_args]
letters = "ab"
"""


@pytest.fixture
def toml_file(tmp_path: Path) -> Path:
    path = tmp_path / "train.toml"
    path.write_text(TOML)
    return path


def test_toml_with_flat_and_dotted_overrides(toml_file: Path) -> None:
    cfg = load_config(toml_file, ["--learning_rate", "1e-3", "--tiny_model.hidden_size=32", "--max-steps", "7"])
    assert cfg.learning_rate == 1e-3
    assert cfg.tiny_model.hidden_size == 32
    assert cfg.tiny_model.num_hidden_layers == 3  # the rest of the TOML table survives a dotted override
    assert cfg.max_steps == 7  # dashes read as underscores
    assert cfg.env_args == {"letters": "ab"} and cfg.prompts_per_step == 4
    assert cfg.rows_per_step == 16


def test_override_values_are_typed() -> None:
    parsed = parse_overrides([
        "--plot", "false", "--progress=True", "--env_args", '{"letters": "xyz"}',
        "--report_to", '["jsonl"]', "--env_id", "letter-repeat", "--max_grad_norm", "null",
    ])
    assert parsed == {
        "plot": False, "progress": True, "env_args": {"letters": "xyz"}, "report_to": ["jsonl"],
        "env_id": "letter-repeat", "max_grad_norm": None,
    }
    assert load_config(None, parsed).max_grad_norm is None


def test_malformed_overrides_are_errors() -> None:
    with pytest.raises(ConfigError, match="--max_steps needs a value"):
        parse_overrides(["--max_steps"])
    with pytest.raises(ConfigError, match="'max_steps'"):
        parse_overrides(["max_steps", "3"])


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (["--learning_rat", "1e-3"], "learning_rat"),
        (["--tiny_model.hidden", "32"], "tiny_model.hidden"),
    ],
)
def test_unknown_key_is_named(toml_file: Path, overrides: list[str], named: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(toml_file, overrides)
    assert f"unknown key '{named}'" in str(err.value)
    assert "did you mean" in str(err.value)  # the closest known key, not a list of all of them


def test_unknown_key_in_the_toml_file(tmp_path: Path) -> None:
    path = tmp_path / "typo.toml"
    path.write_text('model = "tiny"\nnum_generation = 4\n')
    with pytest.raises(ConfigError, match="unknown key 'num_generation'"):
        load_config(path)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (["--learning_rate", "-1"], "learning_rate"),
        (["--overlong", "shorten"], "overlong"),
        (["--max_steps", "many"], "max_steps"),
        (["--top_p", "1.5"], "top_p"),
        (["--tiny_model.arch", "gpt2"], "tiny_model.arch"),
    ],
)
def test_invalid_value_names_the_field(overrides: list[str], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(None, overrides)
    assert f"\n  {field}:" in str(err.value)


def test_rows_must_split_into_gradient_accumulation_steps() -> None:
    with pytest.raises(ConfigError, match="gradient_accumulation_steps=2") as err:
        load_config(None, {"prompts_per_step": 3, "num_generations": 3, "gradient_accumulation_steps": 2})
    assert "9 rows" in str(err.value)
    ok = load_config(None, {"prompts_per_step": 3, "num_generations": 4, "gradient_accumulation_steps": 6})
    assert ok.rows_per_step == 12


def test_missing_and_broken_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("model = \n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)


def test_saved_config_reloads_identically(tmp_path: Path, toml_file: Path) -> None:
    cfg = load_config(toml_file, ["--seed", "7"])
    cfg.save(tmp_path / "out" / "config.json")
    import json

    assert TrainConfig.model_validate(json.loads((tmp_path / "out" / "config.json").read_text())) == cfg


def test_quickstart_example_loads() -> None:
    cfg = load_config(QUICKSTART)
    assert cfg.model == "tiny" and cfg.env_id == "letter-repeat"


def test_algorithm_settings_are_checked_before_anything_runs(tmp_path: Path) -> None:
    from trainers.grpo.trainer import GRPOTrainer

    with pytest.raises(ConfigError, match="unknown algorithm 'ppo'"):
        GRPOTrainer(load_config(None, {"algorithm": "ppo", "output_dir": str(tmp_path)}))
    with pytest.raises(ConfigError, match="expert_data"):
        GRPOTrainer(load_config(None, {"algorithm": "mix", "output_dir": str(tmp_path)}))
    with pytest.raises(ConfigError, match="beta"):
        GRPOTrainer(load_config(None, {"algorithm_overrides": {"beta": -1}, "output_dir": str(tmp_path)}))
    assert not any(tmp_path.iterdir())  # nothing written for a config that cannot run
