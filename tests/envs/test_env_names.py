"""verifiers.envs.names: one id → module mapping and one folder lookup, shared by vf-eval, vf-train and the hub.

vf-train builds its environment with ``vf.load_environment(cfg.env_id, **cfg.env_args)``
(`GRPOTrainer.setup`); vf-eval first puts ``-p DIR`` on ``sys.path`` (`add_env_dir`) and then
calls the same loader. Every layout vf-eval reads in ``./environments`` must therefore load
for vf-train too: the tests below go through vf-train's config and loader on each layout.
"""

from __future__ import annotations

import sys
import textwrap
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

import verifiers as vf
from trainers.grpo.config import load_config
from verifiers.envs import loader
from verifiers.envs.names import find_local_env, module_name
from verifiers.eval.legacy_flags import add_env_dir

ENV_SOURCE = textwrap.dedent(
    """
    import verifiers as vf

    def load_environment(num_examples: int = 2):
        rows = [{"question": f"q{i}", "answer": str(i)} for i in range(num_examples)]
        return vf.SingleTurnEnv(dataset=rows)
    """
)


def _flat(root: Path, m: str) -> Path:  # environments/<m>/<m>.py beside a pyproject.toml (0.1.x)
    (root / m).mkdir(parents=True)
    (root / m / "pyproject.toml").write_text(f'[project]\nname = "{m}"\n')
    (root / m / f"{m}.py").write_text(ENV_SOURCE)
    return root / m


def _package(root: Path, m: str) -> Path:  # environments/<m>/<m>/__init__.py (what vf-init writes)
    (root / m / m).mkdir(parents=True)
    (root / m / m / "__init__.py").write_text(ENV_SOURCE)
    return root / m


def _bare_module(root: Path, m: str) -> Path:  # environments/<m>.py
    root.mkdir(parents=True)
    (root / f"{m}.py").write_text(ENV_SOURCE)
    return root


LAYOUTS: dict[str, Callable[[Path, str], Path]] = {"flat": _flat, "package": _package, "bare": _bare_module}


def test_module_name_maps_dashes_and_org_prefixes() -> None:
    assert module_name("my-env") == "my_env"
    assert module_name("org/my-env") == "my_env"
    assert module_name("my_env") == "my_env"


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_find_local_env_reads_every_layout(tmp_path: Path, layout: str) -> None:
    m = f"vf_names_{uuid.uuid4().hex[:8]}"
    root = tmp_path / "environments"
    expected = LAYOUTS[layout](root, m)
    for env_id in (m, m.replace("_", "-"), f"someorg/{m.replace('_', '-')}"):
        assert find_local_env(env_id, root) == expected
    assert find_local_env("vf-not-there", root) is None


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("org", ["", "someorg/"])
def test_vf_train_loads_every_layout_vf_eval_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str, org: str
) -> None:
    m = f"vf_names_{uuid.uuid4().hex[:8]}"
    env_id = org + m.replace("_", "-")
    LAYOUTS[layout](tmp_path / "environments", m)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    assert vf.load_environment is loader.load_environment  # what GRPOTrainer.setup calls as vf.load_environment
    cfg = load_config(None, ["--env_id", env_id, "--env_args", '{"num_examples": 3}'])
    try:
        env = vf.load_environment(cfg.env_id, **cfg.env_args)  # vf-train: no -p, no sys.path set-up
        assert len(env.get_dataset().rows) == 3 and env.env_id == env_id
    finally:
        sys.modules.pop(m, None)
    monkeypatch.setattr(sys, "path", list(sys.path[1:]))  # vf-eval's way: -p DIR first, then the same loader
    try:
        assert add_env_dir(env_id, "environments", explicit=True) is not None
        assert len(vf.load_environment(env_id, num_examples=3).get_dataset().rows) == 3
    finally:
        sys.modules.pop(m, None)
