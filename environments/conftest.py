"""Make the environment packages under ``environments/`` importable without installing them.

Each package lives in ``environments/<module>/<module>/``, so the importable root is
``environments/<module>``. Adding those roots to ``sys.path`` lets the tests (and
``vf.load_environment("<env-id>")``, which imports ``<module>`` first) run from a plain
checkout; an editable ``pip install`` would give the same result.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_ENVIRONMENTS_DIR = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    for pyproject in sorted(_ENVIRONMENTS_DIR.glob("*/pyproject.toml")):
        root = str(pyproject.parent)
        if root not in sys.path:
            sys.path.insert(0, root)
