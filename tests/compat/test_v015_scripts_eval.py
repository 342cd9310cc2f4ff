"""``verifiers.scripts.eval`` as 0.1.x tests use it (issue 26).

Written from verifiers 0.1.5's ``verifiers/scripts/eval.py``: its module-level names
(imports, ``logger``, ``eval_environment``, ``main``), ``eval_environment``'s
``vf.load_environment(env_id=env, **env_args)`` call, report and saved files. The
model is a real HTTP server on 127.0.0.1 (``ScriptedServer``, echoes the question).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

import verifiers as vf
import verifiers.scripts.eval as eval_mod
from verifiers.testing import ScriptedServer

# Every top-level name of 0.1.5's verifiers/scripts/eval.py (its imports and definitions).
V015_NAMES = [
    "argparse", "importlib", "json", "logging", "time", "uuid", "datetime", "Path", "Dict", "cast",
    "np", "Dataset", "vf", "setup_logging", "Endpoints", "setup_client", "messages_to_printable",
    "sanitize_tool_calls", "logger", "eval_environment", "main",
]  # fmt: skip


def test_module_has_0_1_5s_names() -> None:
    missing = [name for name in V015_NAMES if not hasattr(eval_mod, name)]
    assert not missing
    assert eval_mod.vf is vf and eval_mod.logger.name == "verifiers.scripts.eval"


class _Loader:
    """Stands in for ``vf.load_environment``: records its call, returns a real environment."""

    def __init__(self, rows: list[dict[str, str]], exact_match: Any) -> None:
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        self.rows, self.exact_match = rows, exact_match

    def __call__(self, *args: Any, **kwargs: Any) -> vf.Environment:
        self.calls.append((args, kwargs))
        from datasets import Dataset

        return vf.SingleTurnEnv(dataset=Dataset.from_list(self.rows), rubric=vf.Rubric(funcs=[self.exact_match]))


def _eval_kwargs(server: ScriptedServer, tmp_path: Path, **over: Any) -> dict[str, Any]:
    kwargs: dict[str, Any] = dict(
        env="my-env", env_args={"difficulty": 2}, env_dir_path=str(tmp_path / "environments"),
        endpoints_path=str(tmp_path / "configs" / "endpoints.py"), model="org/m", api_key_var="NO_SUCH_KEY_VAR",
        api_base_url=server.base_url, num_examples=3, rollouts_per_example=2, max_concurrent=4, max_tokens=None,
        temperature=None, sampling_args=None, verbose=False, save_dataset=False, save_to_hf_hub=False,
        hf_hub_dataset_name="", extra_headers={},
    )  # fmt: skip
    kwargs.update(over)
    return kwargs


def test_patching_vf_on_the_module_reaches_eval_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, server: ScriptedServer, rows: Any, exact_match: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    loader = _Loader(rows, exact_match)
    monkeypatch.setattr(eval_mod.vf, "load_environment", loader)
    monkeypatch.chdir(tmp_path)
    eval_mod.eval_environment(**_eval_kwargs(server, tmp_path, save_dataset=True))
    # 0.1.5: vf_env = vf.load_environment(env_id=env, **env_args)
    assert loader.calls == [((), {"env_id": "my-env", "difficulty": 2})]
    out = capsys.readouterr().out
    assert "--- Evaluation ---" in out and "Environment: my-env" in out and "Model: org/m" in out
    # rollouts are ordered rollout-major (r1 = first rollout of every example), as 0.1.5 printed them
    assert "reward: avg - 0.667, std - 0.471" in out
    assert "r1: [1.0, 1.0, 0.0]" in out and "r2: [1.0, 1.0, 0.0]" in out
    assert "exact_match: avg - 0.667" in out
    # 0.1.5 saved ./outputs/evals/ENV--MODEL/UUID/{results.jsonl,metadata.json} (no local env folder)
    (run_dir,) = (tmp_path / "outputs" / "evals" / "my-env--org--m").iterdir()
    lines = (run_dir / "results.jsonl").read_text().splitlines()
    assert len(lines) == 6
    first = json.loads(lines[0])
    assert first["id"] == 0 and first["reward"] == 1.0 and first["answer"] == "alpha"
    assert {"prompt", "completion", "task", "generation_ms", "scoring_ms", "total_ms", "exact_match"} <= set(first)
    metadata = json.loads((run_dir / "metadata.json").read_text())
    assert metadata["env"] == "my-env" and metadata["num_examples"] == 3 and metadata["rollouts_per_example"] == 2
    assert metadata["avg_reward"] == pytest.approx(2 / 3) and metadata["sampling_args"] == {"max_tokens": None}


def test_endpoint_registry_and_sampling_flags(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, server: ScriptedServer, rows: Any, exact_match: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """0.1.5 looked ``model`` up in ``ENDPOINTS`` of endpoints.py and merged -S over -t/-T."""
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "endpoints.py").write_text(
        f"ENDPOINTS = {{'alias': {{'model': 'real-model', 'url': {server.base_url!r}, 'key': 'NO_SUCH_KEY_VAR'}}}}\n"
    )
    created: list[tuple[Any, ...]] = []
    real_setup_client = eval_mod.setup_client

    def setup_client(*args: Any, **kwargs: Any) -> Any:
        created.append(args)
        return real_setup_client(*args, **kwargs)

    monkeypatch.setattr(eval_mod, "setup_client", setup_client)
    monkeypatch.setattr(eval_mod.vf, "load_environment", _Loader(rows, exact_match))
    kwargs = _eval_kwargs(server, tmp_path, model="alias", api_base_url="http://unused.invalid/v1",
                          max_tokens=64, temperature=0.5, sampling_args={"temperature": 0.1})  # fmt: skip
    eval_mod.eval_environment(**kwargs)
    assert created == [(server.base_url, "NO_SUCH_KEY_VAR")]
    assert "Model: real-model" in capsys.readouterr().out
    assert server.requests[-1]["temperature"] == 0.1 and server.requests[-1]["max_tokens"] == 64


def test_mock_patch_of_vf_reaches_main(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: ScriptedServer, rows: Any, exact_match: Any,
) -> None:
    """``mock.patch("verifiers.scripts.eval.vf.load_environment")`` applies to ``main`` (vf-eval)."""
    monkeypatch.chdir(tmp_path)
    loader = _Loader(rows, exact_match)
    with mock.patch("verifiers.scripts.eval.vf.load_environment", side_effect=loader) as patched:
        code = eval_mod.main(["my-env", "-a", '{"difficulty": 3}', "-b", server.base_url, "-m", "m", "-n", "2", "-r", "1"])
    assert code == 0
    patched.assert_called_once_with(env_id="my-env", difficulty=3)
