"""What the code imports is what the project declares, so a fresh install cannot miss a module.

A release of a dependency can stop pulling a package we import (openai 3 replaced httpx with
httpx2, and every fresh install of vf-eval died with ModuleNotFoundError while the test machine,
which had httpx from another package, stayed green). deptry reads every import in verifiers/ and
trainers/ and fails on any third-party module that pyproject.toml does not declare.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import openai
import pytest

import verifiers as vf
from verifiers.testing import ScriptedReply, ScriptedServer, ServerScript
from verifiers.utils.client_utils import setup_client

ROOT = Path(__file__).resolve().parents[2]


def test_every_imported_module_is_declared() -> None:
    deptry = shutil.which("deptry") or str(Path(sys.executable).with_name("deptry"))
    if not Path(deptry).exists():
        pytest.fail("deptry is not installed: pip install -c constraints.txt -e '.[dev]'")
    proc = subprocess.run([deptry, "."], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"undeclared or unused dependencies (fix pyproject.toml):\n{proc.stdout}{proc.stderr}"


async def test_setup_client_talks_to_a_server_with_the_installed_sdk(monkeypatch) -> None:
    """0.1.x `setup_client` hands the SDK an HTTP client of its own: it must be the SDK's library."""
    monkeypatch.setenv("VF_TEST_KEY", "k")
    with ScriptedServer(ServerScript(replies=[ScriptedReply(content="hello")])) as server:
        client = setup_client(server.base_url, "VF_TEST_KEY", timeout=5.0)
        assert isinstance(client, openai.AsyncOpenAI)
        env = vf.SingleTurnEnv(dataset=[{"question": "q", "answer": "hello"}])
        out = await env.a_generate(env.dataset, client, "m")
        await client.close()
    assert out.results[0].error is None
    assert out.completion[0][-1]["content"] == "hello"
