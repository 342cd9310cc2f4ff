"""vLLM's CPU build as an engine of the real-model benchmark: a server the script starts and stops,
and the check that what it serves at the end of a run is the run's ``final_model``.

The server is started as ``vf-vllm`` starts it (`verifiers.inference.vllm.server`: raw logprobs,
prefix caching, chunked prefill off on a CPU) with the chat template ``vf-vllm`` would pick for the
model, so the three engines render the same prompt ids for a chat (tests/vllm/test_vllm_gguf.py).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PROMPT_ROOM = 1024
"""Tokens of context left for the prompt beside the longest reply (the arithmetic prompts are ~60,
reasoning-gym's a few hundred)."""


@contextlib.contextmanager
def vllm_server(model_dir: Path, served_name: str, *, max_tokens: int = 1024, log_path: Path | None = None,
                kv_cache_gib: int = 2) -> Iterator[Any]:
    """A vLLM server on 127.0.0.1 serving ``model_dir`` as ``served_name``, with room for replies of
    ``max_tokens`` (stopped on exit)."""
    from verifiers.inference.vllm.server import VLLMServer, VLLMServerSpec
    from verifiers.models.chat_templates import vllm_chat_template

    spec = VLLMServerSpec(model_dir=str(model_dir), served_model_name=served_name, device="cpu",
                          kv_cache_gib=kv_cache_gib, chat_template=vllm_chat_template(model_dir, None),
                          extra_args=["--max-model-len", str(max_tokens + PROMPT_ROOM)])
    server = VLLMServer(spec, log_path=log_path)
    try:
        server.start(timeout_s=600)
        yield server
    finally:
        server.stop()


def peak_rss_gb(server: Any) -> float | None:
    """The peak resident memory of the server's processes (the API server and vLLM's engine core: the
    process group it was started in), summed; each process's own peak (``VmHWM``), so an upper bound of
    their peak together. None where ``/proc`` cannot say (not Linux)."""
    if server.pid is None:
        return None
    total_kb = 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if os.getpgid(int(proc.name)) != server.pid:
                continue
            status = (proc / "status").read_text()
        except OSError:  # gone, or not ours to read
            continue
        total_kb += next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")), 0)
    return round(total_kb / 2**20, 2) if total_kb else None


@contextlib.contextmanager
def vllm_client(model_dir: Path, served_name: str, max_tokens: int) -> Iterator[Any]:
    """An ``openai`` client on a vLLM server of ``model_dir`` (the baseline's third engine)."""
    import openai

    with vllm_server(model_dir, served_name, max_tokens=max_tokens) as server:
        yield openai.AsyncOpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0, timeout=3600)


def served_equals_saved(base_url: str, served_name: str, model_dir: Path, sequences: list[list[int]]) -> float:
    """The largest difference between the server's logprobs and those of the model saved in
    ``model_dir`` (loaded afresh, float32), over every token of ``sequences``.

    The trainer's probe checks every sync against the weights it holds; this checks the end of the
    chain a user keeps: the directory written at the end of the run against what the server serves.
    """
    from trainers.grpo.sync import probe
    from verifiers.inference.engine.loading import load_model_and_tokenizer
    from verifiers.inference.vllm.admin import VLLMAdmin

    model, _ = load_model_and_tokenizer(model_dir)
    model.eval()
    admin = VLLMAdmin(base_url)
    worst = 0.0
    for ids in sequences:
        check = probe.compare(base_url, admin.prompt_logprobs(served_name, ids), probe.trainer_logprobs(model, ids))
        worst = max(worst, check.max_abs_diff)
    return worst
