"""Embedded server throughput vs. one batched ``model.generate`` vs. one request at a time.

All three generate the same number of tokens for the same 64 chat prompts on the same
model (a tiny random Llama written by `vf-tiny`, sized so the forward pass is not free):

- ``server``: 64 concurrent chat requests through ``vf-serve`` in its own process, sent
  with the official ``openai`` client (``ignore_eos`` so every request yields
  ``--max-tokens`` tokens);
- ``generate``: one ``model.generate`` call on the 64 left-padded prompts with
  ``min_new_tokens == max_new_tokens`` (same token count), in this process;
- ``sequential``: the 64 requests through the same server, one after another.

Targets (issue 4): server >= 0.8x generate and >= 10x sequential.
The last line printed is one JSON object.

    python benchmarks/serve_throughput.py [--hidden 256 --layers 4 --max-tokens 96]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import verifiers as vf


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def prompts(n: int) -> list[list[dict[str, str]]]:
    return [[{"role": "user", "content": f"Question {i}: " + "abcdefgh"[: 1 + i % 8] * (1 + i % 5)}] for i in range(n)]


def bench_generate(model_dir: Path, chats: list, max_tokens: int) -> float:
    import torch

    from verifiers.data.templating import apply_chat_template
    from verifiers.inference.engine.loading import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer(model_dir)
    ids = [apply_chat_template(tok, c) for c in chats]
    width = max(len(x) for x in ids)
    inp = torch.full((len(ids), width), tok.pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(inp)
    for i, x in enumerate(ids):
        inp[i, width - len(x):] = torch.tensor(x)
        mask[i, width - len(x):] = 1
    kw = dict(attention_mask=mask, max_new_tokens=max_tokens, min_new_tokens=max_tokens, do_sample=True,
              temperature=1.0, top_k=0, top_p=1.0, pad_token_id=tok.pad_token_id)
    with torch.inference_mode():
        model.generate(inp[:4], **{**kw, "attention_mask": mask[:4], "max_new_tokens": 4, "min_new_tokens": 4})
        t = time.perf_counter()
        out = model.generate(inp, **kw)
        dt = time.perf_counter() - t
    generated = (out.shape[1] - width) * len(ids)
    return generated / dt


async def bench_server(base_url: str, chats: list, max_tokens: int, concurrent: bool) -> tuple[float, int]:
    client = vf.make_client(base_url, max_retries=0, timeout=600)
    extra = {"ignore_eos": True, "return_token_ids": True}

    async def one(chat: list) -> int:
        r = await client.chat.completions.create(
            model="tiny", messages=chat, max_tokens=max_tokens, temperature=1.0, extra_body=extra
        )
        return r.usage.completion_tokens

    await one(chats[0])  # warm-up
    t = time.perf_counter()
    if concurrent:
        counts = await asyncio.gather(*[one(c) for c in chats])
    else:
        counts = [await one(c) for c in chats]
    dt = time.perf_counter() - t
    await client.close()
    return sum(counts) / dt, sum(counts)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--sequential-requests", type=int, default=16,
                    help="requests timed one at a time (tokens/s is a rate, so a subset suffices)")
    a = ap.parse_args()
    chats = prompts(a.requests)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "tiny"
        subprocess.run([sys.executable, "-m", "verifiers.models.tiny", str(model_dir), "--hidden-size",
                        str(a.hidden), "--intermediate-size", str(a.hidden * 3), "--layers", str(a.layers),
                        "--heads", str(a.heads), "--kv-heads", str(max(1, a.heads // 2))],
                       check=True, capture_output=True)
        port = free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "verifiers.cli.serve", str(model_dir), "--port", str(port),
             "--served-model-name", "tiny"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        try:
            deadline = time.time() + 120
            while True:
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).read()
                    break
                except OSError:
                    if server.poll() is not None or time.time() > deadline:
                        raise RuntimeError("vf-serve did not start: " + server.stderr.read().decode()[-2000:]) from None
                    time.sleep(0.2)
            base = f"http://127.0.0.1:{port}/v1"
            server_tok_s, n_tokens = asyncio.run(bench_server(base, chats, a.max_tokens, True))
            seq_tok_s, _ = asyncio.run(bench_server(base, chats[: a.sequential_requests], a.max_tokens, False))
        finally:
            server.terminate()
            server.wait(timeout=30)
        generate_tok_s = bench_generate(model_dir, chats, a.max_tokens)
    out = {
        "server_tok_s": round(server_tok_s, 1),
        "generate_tok_s": round(generate_tok_s, 1),
        "sequential_tok_s": round(seq_tok_s, 1),
        "ratio_vs_generate": round(server_tok_s / generate_tok_s, 3),
        "ratio_vs_sequential": round(server_tok_s / seq_tok_s, 2),
        "requests": a.requests,
        "max_tokens": a.max_tokens,
        "server_tokens": n_tokens,
        "model": {"hidden": a.hidden, "layers": a.layers, "heads": a.heads},
        "targets_met": server_tok_s >= 0.8 * generate_tok_s and server_tok_s >= 10 * seq_tok_s,
    }
    print(f"server {server_tok_s:.0f} tok/s | generate {generate_tok_s:.0f} tok/s | sequential {seq_tok_s:.0f} tok/s")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
