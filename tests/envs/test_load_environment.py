"""load_environment: find an environment package by id and build it."""

from __future__ import annotations

import sys
import textwrap
import uuid
from pathlib import Path

import pytest

import verifiers as vf

ENV_SOURCE = textwrap.dedent(
    """
    import verifiers as vf

    def load_environment(num_examples: int = 2, system_prompt: str = "default"):
        rows = [{"question": f"q{i}", "answer": str(i)} for i in range(num_examples)]
        return vf.SingleTurnEnv(dataset=rows, system_prompt=system_prompt)
    """
)


@pytest.fixture
def env_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Write a tiny environment package `vf_tmp_env_<hex>` and put it on sys.path."""
    module = f"vf_tmp_env_{uuid.uuid4().hex[:8]}"
    pkg = tmp_path / module
    pkg.mkdir()
    (pkg / "__init__.py").write_text(ENV_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield module
    sys.modules.pop(module, None)


def test_load_environment_maps_dashes_and_passes_kwargs(env_package: str) -> None:
    env_id = env_package.replace("_", "-")
    env = vf.load_environment(env_id, num_examples=4, system_prompt="custom")
    assert isinstance(env, vf.SingleTurnEnv)
    assert len(env.dataset) == 4
    assert env.dataset[0]["prompt"][0] == {"role": "system", "content": "custom"}
    assert env.env_id == env_id


def test_load_environment_by_module_name(env_package: str) -> None:
    env = vf.load_environment(env_package)
    assert len(env.dataset) == 2


def test_missing_environment_mentions_vf_install() -> None:
    with pytest.raises(vf.ConfigError) as ei:
        vf.load_environment("definitely-not-installed-env-xyz")
    msg = str(ei.value)
    assert "vf-install definitely-not-installed-env-xyz" in msg
    assert "definitely_not_installed_env_xyz" in msg


def test_bad_kwargs_are_a_config_error(env_package: str) -> None:
    with pytest.raises(vf.ConfigError, match="no_such_arg"):
        vf.load_environment(env_package, no_such_arg=1)


def test_module_without_load_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = f"vf_tmp_noload_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with pytest.raises(vf.VFError, match="load_environment"):
            vf.load_environment(module)
    finally:
        sys.modules.pop(module, None)


def test_loader_returning_non_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = f"vf_tmp_bad_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text("def load_environment(**kw):\n    return 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with pytest.raises(vf.EnvError, match="int"):
            vf.load_environment(module)
    finally:
        sys.modules.pop(module, None)


def test_missing_dependency_of_env_package_is_not_masked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An environment whose own import fails must say which module is missing, not 'not installed'."""
    module = f"vf_tmp_dep_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text("import vf_no_such_dependency_abc\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with pytest.raises(ModuleNotFoundError, match="vf_no_such_dependency_abc"):
            vf.load_environment(module)
    finally:
        sys.modules.pop(module, None)


def test_a_checkout_package_loads_without_an_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """From a clone's root, ``environments/<module>/<module>`` is found without `pip install -e`."""
    module = f"vf_tmp_env_{uuid.uuid4().hex[:8]}"
    pkg = tmp_path / "environments" / module / module
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(ENV_SOURCE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the loader adds the package's folder
    try:
        env = vf.load_environment(module.replace("_", "-"), num_examples=3)
        assert len(env.get_dataset().rows) == 3
        assert str((tmp_path / "environments" / module).resolve()) in sys.path
    finally:
        sys.modules.pop(module, None)
    monkeypatch.chdir(tmp_path / "environments")  # elsewhere the id is still unknown, with the fix named
    with pytest.raises(vf.ConfigError, match="pip install -e"):
        vf.load_environment(f"vf-missing-{uuid.uuid4().hex[:6]}")


def test_an_environment_named_like_the_library_it_wraps_lives_in_module_env(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A library owns the id's module name (reasoning-gym's ``reasoning_gym``): the environment's
    source is ``environments/<module>_env``, which the loader finds after the library."""
    module = f"vf_tmp_lib_{uuid.uuid4().hex[:8]}"
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / f"{module}.py").write_text("VALUE = 1\n")  # the library: no load_environment
    pkg = tmp_path / "environments" / f"{module}_env" / f"{module}_env"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(f"import {module}\n" + ENV_SOURCE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(tmp_path / "site"), *sys.path])
    try:
        env = vf.load_environment(module.replace("_", "-"), num_examples=2)
        assert len(env.get_dataset().rows) == 2
        monkeypatch.chdir(tmp_path / "environments")  # no checkout here: the library alone is named as such
        sys.modules.pop(f"{module}_env", None)
        monkeypatch.setattr(sys, "path", [p for p in sys.path if not p.endswith(f"{module}_env")])
        with pytest.raises(vf.EnvError, match=f"module '{module}' has no load_environment.*{module}_env"):
            vf.load_environment(module.replace("_", "-"))
    finally:
        sys.modules.pop(module, None)
        sys.modules.pop(f"{module}_env", None)
