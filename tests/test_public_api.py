"""The public surface of ``import verifiers as vf``."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import verifiers as vf


def test_every_name_in_all_is_importable() -> None:
    assert len(vf.__all__) == len(set(vf.__all__)), "duplicate names in __all__"
    module = importlib.import_module("verifiers")
    missing = [name for name in vf.__all__ if not hasattr(module, name)]
    assert missing == []
    for name in vf.__all__:
        exec(f"from verifiers import {name}", {})  # the statement users write


def test_core_names_are_exported() -> None:
    expected = {
        "Environment",
        "SingleTurnEnv",
        "MultiTurnEnv",
        "ToolEnv",
        "StatefulToolEnv",
        "EnvGroup",
        "Rubric",
        "RubricGroup",
        "JudgeRubric",
        "MathRubric",
        "ToolRubric",
        "Parser",
        "XMLParser",
        "ThinkParser",
        "load_environment",
        "make_client",
        "ConfigError",
        "GenerateOutputs",
        "RolloutResult",
    }
    assert expected <= set(vf.__all__)


def test_error_hierarchy() -> None:
    assert issubclass(vf.ConfigError, vf.VFError) and issubclass(vf.ConfigError, ValueError)
    assert issubclass(vf.JudgeError, vf.RubricError)
    assert issubclass(vf.OverlongPromptError, vf.ModelError)
    assert issubclass(vf.RolloutTimeoutError, vf.EnvError)
    for name in ("ModelError", "EnvError", "RubricError", "ToolError"):
        assert issubclass(getattr(vf, name), vf.VFError)


def test_version() -> None:
    assert isinstance(vf.__version__, str) and vf.__version__


@pytest.mark.timeout(60)
def test_import_does_not_pull_heavy_dependencies() -> None:
    code = (
        "import sys, verifiers as vf\n"
        "heavy = [m for m in ('torch', 'transformers', 'vllm', 'sympy', 'math_verify') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "torch" not in proc.stdout.strip().split(","), proc.stdout
    assert proc.stdout.strip() == "", f"imported at `import verifiers`: {proc.stdout.strip()}"
