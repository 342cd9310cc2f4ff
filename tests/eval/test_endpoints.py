"""The endpoints registry: TOML aliases, defaults search, round-robin over real servers."""

from __future__ import annotations

from pathlib import Path

import pytest

from verifiers.errors import ConfigError
from verifiers.eval.endpoints import (
    Endpoint,
    api_key_for,
    find_endpoints_file,
    load_endpoints,
    resolve_endpoints,
)
from verifiers.eval.runner import EvalConfig, run_eval
from verifiers.testing import ScriptedServer, ServerScript

REGISTRY = """
[small]
model = "gpt-small"
base_url = "http://127.0.0.1:1/v1"
api_key_var = "SMALL_KEY"

[[pool]]
model = "replica-a"
base_url = "http://127.0.0.1:2/v1"

[[pool]]
model = "replica-b"
url = "http://127.0.0.1:3/v1"
key = "POOL_KEY"
"""


def write(tmp_path: Path, text: str, name: str = "endpoints.toml") -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_tables_and_arrays_of_tables(tmp_path: Path) -> None:
    reg = load_endpoints(write(tmp_path, REGISTRY))
    assert reg["small"] == [
        Endpoint(model="gpt-small", base_url="http://127.0.0.1:1/v1", api_key_var="SMALL_KEY")
    ]
    assert [e.model for e in reg["pool"]] == ["replica-a", "replica-b"]
    assert reg["pool"][0].api_key_var == "OPENAI_API_KEY"  # default variable name
    assert reg["pool"][1].base_url == "http://127.0.0.1:3/v1" and reg["pool"][1].api_key_var == "POOL_KEY"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[a\nmodel='x'", "not valid TOML"),
        ("[a]\nbase_url='http://x'", "model"),
        ("[a]\nmodel='x'\nbase_url='http://x'\ntemperature=1", "temperature"),
        ("a = 3", "table"),
    ],
)
def test_bad_registries_name_the_problem(tmp_path: Path, text: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        load_endpoints(write(tmp_path, text))


def test_alias_fills_model_url_and_key_var_and_flags_override(tmp_path: Path) -> None:
    path = write(tmp_path, REGISTRY)
    eps, alias = resolve_endpoints("small", endpoints_path=path)
    assert alias == "small" and eps == [
        Endpoint(model="gpt-small", base_url="http://127.0.0.1:1/v1", api_key_var="SMALL_KEY")
    ]
    eps, _ = resolve_endpoints(
        "small", endpoints_path=path, base_url="http://127.0.0.1:9/v1", api_key_var="K"
    )
    assert eps == [Endpoint(model="gpt-small", base_url="http://127.0.0.1:9/v1", api_key_var="K")]
    # A name that is not an alias is just a model name.
    eps, alias = resolve_endpoints("some/model", endpoints_path=path, default_base_url="http://d/v1")
    assert alias is None and eps == [Endpoint(model="some/model", base_url="http://d/v1")]


def test_default_search_and_missing_explicit_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert find_endpoints_file() is None
    home_file = write(
        tmp_path, "[h]\nmodel='m'\nbase_url='http://h/v1'", "home/.config/verifiers/endpoints.toml"
    )
    assert find_endpoints_file() == home_file
    local = write(tmp_path, "[l]\nmodel='m'\nbase_url='http://l/v1'", "configs/endpoints.toml")
    assert find_endpoints_file().resolve() == local.resolve()  # ./configs wins over the home file
    assert resolve_endpoints("l")[1] == "l"
    with pytest.raises(ConfigError, match="does not exist"):
        find_endpoints_file(tmp_path / "nope.toml")


def test_unset_key_variable_gives_the_placeholder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VF_TEST_UNSET_KEY", raising=False)
    assert api_key_for(Endpoint(model="m", base_url="u", api_key_var="VF_TEST_UNSET_KEY")) == ("EMPTY", False)
    monkeypatch.setenv("VF_TEST_UNSET_KEY", "sk-123")
    assert api_key_for(Endpoint(model="m", base_url="u", api_key_var="VF_TEST_UNSET_KEY")) == ("sk-123", True)


def test_alias_with_two_endpoints_round_robins_over_real_servers(tmp_path: Path, echo_env) -> None:
    with ScriptedServer(ServerScript()) as a, ScriptedServer(ServerScript()) as b:
        path = write(
            tmp_path,
            f'[[duo]]\nmodel="model-a"\nbase_url="{a.base_url}"\n\n[[duo]]\nmodel="model-b"\nbase_url="{b.base_url}"\n',
        )
        config = EvalConfig(
            env_id="echo",
            model="duo",
            endpoints_path=path,
            num_examples=4,
            rollouts_per_example=2,
            save=True,
            output_dir=tmp_path / "out",
            show_progress=False,
        )
        out = run_eval(config, env=echo_env(4))
        assert out.status == "complete" and len(out.results) == 8
        assert a.n_requests == 4 and b.n_requests == 4
        assert {r["model"] for r in a.requests} == {"model-a"}  # each replica is asked for its own name
        assert {r["model"] for r in b.requests} == {"model-b"}
        assert out.metadata is not None
        assert out.metadata.model_alias == "duo" and out.metadata.endpoints == [a.base_url, b.base_url]
        assert out.run_dir is not None and out.run_dir.parent.name == "echo--model-a"
