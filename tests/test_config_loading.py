"""verifiers.config: one TOML reader, one override parser and one 'did you mean' for every config model."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from verifiers.config import load_toml, merge, parse_overrides, validate
from verifiers.errors import ConfigError
from verifiers.eval.endpoints import load_endpoints
from verifiers.hub.install import configured_hub


class Inner(BaseModel):
    model_config = ConfigDict(extra="forbid")
    hidden_size: int = 8


class Outer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    learning_rate: float = 1e-3
    base_url: str = Field("u", validation_alias=AliasChoices("base_url", "url"))
    inner: Inner | None = None


def test_load_toml_words_errors_as_the_caller_asks(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^x .*nope.toml. is gone$"):
        load_toml(tmp_path / "nope.toml", missing="x {path!r} is gone")
    bad = tmp_path / "bad.toml"
    bad.write_text("a = \n")
    with pytest.raises(ConfigError, match=r"bad.toml is not valid TOML: "):
        load_toml(bad)
    bad.write_text("a = 1\n[b]\nc = 'd'\n")
    assert load_toml(bad) == {"a": 1, "b": {"c": "d"}}


def test_overrides_nest_and_merge_over_tables() -> None:
    over = parse_overrides(["--inner.hidden-size", "16", "--flag=true", "--name", "x"])
    assert over == {"inner": {"hidden_size": 16}, "flag": True, "name": "x"}
    assert merge({"inner": {"a": 1}, "name": "y"}, over) == {"inner": {"a": 1, "hidden_size": 16}, "flag": True,
                                                             "name": "x"}


def test_validate_suggests_close_keys_at_any_depth_and_aliases() -> None:
    with pytest.raises(ConfigError) as err:
        validate(Outer, {"learning_rat": 1, "inner": {"hidden": 3}, "ulr": "v"}, "test config")
    text = str(err.value)
    assert text.startswith("invalid test config:\n  ")
    assert "unknown key 'learning_rat': did you mean 'learning_rate'?" in text
    assert "unknown key 'inner.hidden': did you mean 'inner.hidden_size'?" in text
    assert "unknown key 'ulr': did you mean 'url'?" in text
    with pytest.raises(ConfigError, match=r"unknown key 'zzz': every key is listed in docs/x\.md"):
        validate(Outer, {"zzz": 1}, "test config", docs="docs/x.md")
    with pytest.raises(ConfigError, match="unknown key 'zzz': the keys are 'base_url', 'inner'"):
        validate(Outer, {"zzz": 1}, "test config")
    assert validate(Outer, {"url": "v"}, "test config").base_url == "v"


def test_endpoints_and_hub_configs_suggest_the_key_they_meant(tmp_path: Path) -> None:
    registry = tmp_path / "endpoints.toml"
    registry.write_text("[a]\nmodle = 'x'\nbase_url = 'http://x/v1'\n")
    with pytest.raises(ConfigError, match=r"alias 'a': .*unknown key 'modle': did you mean 'model'\?"):
        load_endpoints(registry)
    hub = tmp_path / "hub.toml"
    hub.write_text("indexurl = 'http://hub/simple'\n")
    with pytest.raises(ConfigError, match=r"not a valid hub config \(unknown key 'indexurl': did you mean 'index_url'\?\)"):
        configured_hub({}, hub)
