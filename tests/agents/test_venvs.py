"""How the agent programs' venvs are built: reused when present, a skip only without an index.

Real pip against real HTTP on 127.0.0.1: an index that refuses connections must skip the
agent tests with its address in the message; an index that answers but cannot satisfy the
requirements must fail them with pip's own words (never a silent pass).
"""

from __future__ import annotations

import functools
import http.server
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow  # each builds a venv (python -m venv bootstraps pip: a few seconds)


@pytest.fixture
def isolated_pip(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """pip with no configuration files, no cache, no retries; venvs cached under tmp_path."""
    for var in [v for v in os.environ if v.startswith("PIP_")]:
        monkeypatch.delenv(var)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_DEFAULT_TIMEOUT", "10")
    monkeypatch.setenv("VF_TEST_AGENTS_DIR", str(tmp_path / "venvs"))
    requirements = tmp_path / "requirements-nothing.txt"
    requirements.write_text("vf-no-such-package-for-tests==1.0\n")
    return requirements


@pytest.fixture
def empty_index(tmp_path: Path) -> Iterator[str]:
    """A package index on 127.0.0.1 that answers and holds nothing."""
    root = tmp_path / "index"
    (root / "pip").mkdir(parents=True)
    (root / "pip" / "index.html").write_text("<html><body></body></html>")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def _refused_url() -> str:
    import socket

    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/simple"


def test_an_unreachable_index_skips_with_its_address(agent_venvs: Any, isolated_pip: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    url = _refused_url()
    monkeypatch.setenv("PIP_INDEX_URL", url)
    with pytest.raises(pytest.skip.Exception, match="package index is unreachable") as skipped:
        agent_venvs.agent_python(isolated_pip)
    assert url in str(skipped.value) and "requirements-nothing.txt" in str(skipped.value)
    assert not agent_venvs.venv_dir(isolated_pip).exists()  # the half-built venv is gone


def test_a_failed_install_from_a_reachable_index_fails_with_pips_words(
    agent_venvs: Any, isolated_pip: Path, empty_index: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", empty_index)
    with pytest.raises(pytest.fail.Exception) as failed:
        agent_venvs.agent_python(isolated_pip)
    message = str(failed.value)
    assert "exited with code 1 although the index" in message and empty_index in message
    assert "vf-no-such-package-for-tests" in message  # what pip said about it


def test_a_built_venv_is_reused_and_edited_requirements_get_their_own(
    agent_venvs: Any, isolated_pip: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = agent_venvs.venv_dir(isolated_pip)
    # A complete venv (marker + a working interpreter) is used as it is: nothing is built.
    (first / "bin").mkdir(parents=True)
    (first / "bin" / "python").symlink_to(sys.executable)
    (first / "vf-complete.json").write_text('{"build_s": 12.5}')
    monkeypatch.setattr(agent_venvs, "_build", lambda *a: pytest.fail("rebuilt a complete venv"))
    python = agent_venvs.agent_python(isolated_pip)
    assert python == first / "bin" / "python" and agent_venvs.build_seconds(python) == 12.5
    # Another requirement set is another venv; a folder without the marker is not complete.
    isolated_pip.write_text("vf-no-such-package-for-tests==2.0\n")
    assert agent_venvs.venv_dir(isolated_pip) != first
    (first / "vf-complete.json").unlink()
    assert not agent_venvs._is_complete(first)
