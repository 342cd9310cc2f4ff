"""Fixtures for the data tests: the tiny character-level chat tokenizer (see _tiny_tokenizer.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest


def _builder_module() -> Any:
    # Loaded by path: tests run with --import-mode=importlib, so sibling modules are not importable by name.
    path = Path(__file__).with_name("_tiny_tokenizer.py")
    spec = importlib.util.spec_from_file_location("vf_tests_tiny_tokenizer", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def tiny_tokenizer_module() -> Any:
    return _builder_module()


@pytest.fixture
def tiny_tokenizer(tiny_tokenizer_module: Any) -> Any:
    return tiny_tokenizer_module.build_tiny_tokenizer()


@pytest.fixture
def tiny_tokenizer_dir(tiny_tokenizer: Any, tmp_path: Path) -> Path:
    """The tokenizer saved with save_pretrained, to be loaded again by path (as in worker processes)."""
    out = tmp_path / "tiny-tokenizer"
    tiny_tokenizer.save_pretrained(str(out))
    return out
