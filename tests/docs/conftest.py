"""Session fixtures for the docs' snippets: a fresh venv built by the README's install, a scripted server.

Building the venv takes one to a few minutes (pip's cache makes later builds faster); every
snippet shares it, as a user following the docs would. While editing a doc,
``VF_DOCS_CLONE=<the clone0 folder of an earlier run>`` reuses that venv (the checkout's files
are copied over it; what earlier snippets created there stays).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


def snippets_module() -> Any:
    """`_snippets.py`, loaded once; test modules take it as ``from .conftest import S``."""
    # Loaded by path: tests run with --import-mode=importlib, so sibling modules are not importable by name.
    path = Path(__file__).with_name("_snippets.py")
    spec = importlib.util.spec_from_file_location("vf_tests_doc_snippets", path)
    assert spec is not None and spec.loader is not None
    module = sys.modules.get(spec.name)
    if module is None:  # registered first: its dataclasses look their module up by name
        module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return module


S = snippets_module()


@pytest.fixture(scope="session")
def doc_venv(tmp_path_factory: pytest.TempPathFactory) -> Any:
    if shutil.which("python3.11") is None:
        pytest.skip("the README's install needs python3.11 on PATH")
    install = S.readme_install_command()
    reuse = os.environ.get("VF_DOCS_CLONE")  # while editing docs: a clone built by an earlier run, refreshed
    if reuse and (Path(reuse) / ".venv" / "bin" / "python").exists():
        S.copy_checkout(Path(reuse))
        return S.DocVenv(Path(reuse), Path(reuse) / ".venv", install)
    clone = tmp_path_factory.mktemp("clone")
    S.copy_checkout(clone)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(["bash", "-c", install], cwd=clone, env=env, capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, f"{install}\nfailed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return S.DocVenv(clone, clone / ".venv", install)


@pytest.fixture(scope="session")
def scripted_base_url(doc_venv: Any) -> Iterator[str]:
    """``python -m verifiers.testing.server`` from the fresh venv, on a free port, for MODEL/BASE_URL snippets."""
    proc = subprocess.Popen(
        [str(doc_venv.venv / "bin" / "python"), "-m", "verifiers.testing.server", "--port", "0",
         "--parent-pid", str(os.getpid())],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=doc_venv.env(), cwd=doc_venv.clone,
    )
    try:
        assert proc.stdout is not None
        seen = []
        for line in proc.stdout:
            seen.append(line)
            m = re.search(r"LISTENING (\d+)", line)
            if m:
                break
        else:
            raise AssertionError(f"the scripted server did not start:\n{''.join(seen)}")
        yield f"http://127.0.0.1:{m.group(1)}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


