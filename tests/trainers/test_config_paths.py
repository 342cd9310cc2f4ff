"""Relative paths in a config are found when vf-train runs from elsewhere, or the error says where it looked."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainers.grpo.config import load_config
from verifiers.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
AGENTIC = REPO / "examples" / "configs" / "agentic.toml"


def test_expert_data_relative_to_the_checkout_is_found_from_another_folder(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = load_config(AGENTIC)
    assert Path(cfg.expert_data).resolve() == REPO / "examples" / "data" / "key_lookup_expert.jsonl"
    monkeypatch.chdir(REPO)  # from the checkout it stays as written
    assert load_config(AGENTIC).expert_data == "examples/data/key_lookup_expert.jsonl"


def test_a_missing_expert_file_names_every_place_looked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "cfgs" / "run.toml"
    config.parent.mkdir()
    config.write_text('expert_data = "data/missing.jsonl"\nsft_warmup_steps = 1\n')
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as err:
        load_config(config)
    message = str(err.value)
    assert f"looked in {tmp_path / 'data' / 'missing.jsonl'} (the working directory)" in message
    assert str(config.parent / "data" / "missing.jsonl") in message and "absolute path" in message


def test_an_environment_not_found_says_where_it_was_looked_for(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import verifiers as vf

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as err:
        vf.load_environment("no-such-env-anywhere")
    assert f"no checkout under {tmp_path / 'environments'}" in str(err.value)
    assert "run from the folder that holds environments/no_such_env_anywhere" in str(err.value)
