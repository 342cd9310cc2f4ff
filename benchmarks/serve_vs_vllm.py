"""The embedded server (`vf-serve`) against vLLM on the same model, 64 concurrent chat requests.

Both servers run in their own process on 127.0.0.1 and serve the same `vf-tiny` checkpoint
(head size 64, which vLLM's CPU attention accepts) in float32; the same 64 chat prompts are
sent at once with the official ``openai`` client (``ignore_eos``, so every request yields
``--max-tokens`` tokens), after one warm-up request. Each server is timed ``--rounds`` times,
alternating, and its best round counts (the machine is shared and noisy). vLLM runs with its
own defaults for threads and compilation (``--eager`` turns compilation off).

Two model sizes by default: the tiny training model (hidden 128, 2 layers) and a ~25M-parameter
one (hidden 512, 8 layers). Target (issue 9): vf-serve / vLLM tokens/s >= 1.0 on CPU.
The last line printed is one JSON object.

    python benchmarks/serve_vs_vllm.py [--sizes tiny,25m] [--max-tokens 96] [--rounds 3]

``--streaming`` (issue 28): vLLM's own load generator, ``vllm bench serve`` (streaming chat, random
32 -> 64 tokens with ``ignore_eos``, 128 prompts, concurrency 64), against each server in turn, best of
``--rounds``; per size ``ours_tok_s``, ``vllm_tok_s``, ``ratio``, ``ours_tpot_ms``, ``vllm_tpot_ms``,
``ours_ttft_ms``, ``vllm_ttft_ms``, and the load average at start and end. Where vLLM's bench client
cannot run, ``benchmarks/_stream_load.own_load`` reproduces its workload and metrics (``--client own``
forces it). Target: ratio >= 1.0 and our time per output token <= vLLM's at both sizes.

    python benchmarks/serve_vs_vllm.py --streaming [--sizes tiny,25m] [--rounds 2] [--client vllm|own]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from _stream_load import BenchUnavailable, own_load, vllm_bench  # benchmarks/, the script's own directory

import verifiers as vf
from verifiers.inference.vllm.server import VLLMServer, VLLMServerSpec, free_port

SIZES = {
    "tiny": {"hidden": 128, "intermediate": 256, "layers": 2, "heads": 2, "kv_heads": 1},
    "25m": {"hidden": 512, "intermediate": 1536, "layers": 8, "heads": 8, "kv_heads": 4},
}


def prompts(n: int) -> list[list[dict[str, str]]]:
    return [[{"role": "user", "content": f"Question {i}: " + "abcdefgh"[: 1 + i % 8] * (1 + i % 5)}] for i in range(n)]


def build_model(out: Path, shape: dict[str, int]) -> int:
    subprocess.run([sys.executable, "-m", "verifiers.models.tiny", str(out), "--hidden-size", str(shape["hidden"]),
                    "--intermediate-size", str(shape["intermediate"]), "--layers", str(shape["layers"]),
                    "--heads", str(shape["heads"]), "--kv-heads", str(shape["kv_heads"])],
                   check=True, capture_output=True)
    from safetensors.torch import load_file

    return sum(t.numel() for t in load_file(str(out / "model.safetensors")).values())


async def tokens_per_second(base_url: str, model: str, chats: list, max_tokens: int) -> float:
    client = vf.make_client(base_url, max_retries=0, timeout=600)
    extra = {"ignore_eos": True}

    async def one(chat: list) -> int:
        r = await client.chat.completions.create(model=model, messages=chat, max_tokens=max_tokens,
                                                 temperature=1.0, extra_body=extra)
        return r.usage.completion_tokens

    await one(chats[0])  # warm-up
    t = time.perf_counter()
    counts = await asyncio.gather(*[one(c) for c in chats])
    dt = time.perf_counter() - t
    await client.close()
    return sum(counts) / dt


class VFServe:
    def __init__(self, model_dir: Path, threads: int | None = None) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "verifiers.cli.serve", str(model_dir), "--port", str(self.port),
             "--served-model-name", "policy", *(["--threads", str(threads)] if threads else [])],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        deadline = time.time() + 180
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=1).read()
                break
            except OSError:
                if self.proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError("vf-serve did not start") from None
                time.sleep(0.2)
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def bench_size(name: str, a: argparse.Namespace, tmp: Path) -> dict[str, object]:
    model_dir = tmp / name
    params = build_model(model_dir, SIZES[name])
    chats = prompts(a.requests)
    extra = ["--max-model-len", "1024"] + (["--enforce-eager"] if a.eager else [])
    vllm = VLLMServer(VLLMServerSpec(model_dir=str(model_dir), kv_cache_gib=2, extra_args=extra),
                      log_path=tmp / f"vllm-{name}.log").start(timeout_s=900)
    ours = VFServe(model_dir, a.ours_threads)
    runs: dict[str, list[float]] = {"vf_serve": [], "vllm": []}
    try:
        for _ in range(a.rounds):  # alternate, so drifts in machine load hit both
            runs["vf_serve"].append(asyncio.run(tokens_per_second(ours.base_url, "policy", chats, a.max_tokens)))
            runs["vllm"].append(asyncio.run(tokens_per_second(vllm.base_url, "policy", chats, a.max_tokens)))
    finally:
        ours.stop()
        vllm.stop()
    best = {k: max(v) for k, v in runs.items()}
    print(f"{name} ({params / 1e6:.2f}M params): vf-serve {best['vf_serve']:.0f} tok/s, "
          f"vLLM {best['vllm']:.0f} tok/s, ratio {best['vf_serve'] / best['vllm']:.2f}", flush=True)
    return {"params": params, "vf_serve_tok_s": round(best["vf_serve"], 1), "vllm_tok_s": round(best["vllm"], 1),
            "ratio": round(best["vf_serve"] / best["vllm"], 3),
            "rounds": {k: [round(x, 1) for x in v] for k, v in runs.items()}}


def stream_round(base_url: str, model_dir: Path, a: argparse.Namespace) -> dict[str, float]:
    """One ``vllm bench serve`` run (or the stand-in) against ``base_url`` (``http://host:port``)."""
    kw = {"input_len": a.input_len, "output_len": a.output_len, "prompts": a.num_prompts,
          "concurrency": a.concurrency}
    if a.client == "vllm":
        try:
            return {**vllm_bench(base_url, "policy", str(model_dir), **kw), "client": "vllm bench serve"}
        except BenchUnavailable as exc:
            print(f"vllm bench serve cannot run here, using our own load generator: {exc}", flush=True)
            a.client = "own"
    return {**own_load(base_url, "policy", str(model_dir), **kw), "client": "own"}


def stream_size(name: str, a: argparse.Namespace, tmp: Path) -> dict[str, object]:
    model_dir = tmp / name
    params = build_model(model_dir, SIZES[name])
    extra = ["--max-model-len", "1024"] + (["--enforce-eager"] if a.eager else [])
    vllm = VLLMServer(VLLMServerSpec(model_dir=str(model_dir), kv_cache_gib=2, extra_args=extra),
                      log_path=tmp / f"vllm-{name}.log").start(timeout_s=900)
    ours = VFServe(model_dir, a.ours_threads)
    runs: dict[str, list[dict[str, float]]] = {"ours": [], "vllm": []}
    try:
        for _ in range(a.rounds):  # alternate, so drifts in machine load hit both
            runs["ours"].append(stream_round(ours.base_url.removesuffix("/v1"), model_dir, a))
            runs["vllm"].append(stream_round(vllm.base_url.removesuffix("/v1"), model_dir, a))
    finally:
        ours.stop()
        vllm.stop()
    best = {k: max(v, key=lambda r: r["tok_s"]) for k, v in runs.items()}
    o, v = best["ours"], best["vllm"]
    print(f"{name} ({params / 1e6:.2f}M params) streaming: vf-serve {o['tok_s']:.0f} tok/s (TPOT {o['tpot_ms']:.2f} "
          f"ms, TTFT {o['ttft_ms']:.0f} ms), vLLM {v['tok_s']:.0f} tok/s (TPOT {v['tpot_ms']:.2f} ms, TTFT "
          f"{v['ttft_ms']:.0f} ms), ratio {o['tok_s'] / v['tok_s']:.2f}", flush=True)
    return {"params": params, "ours_tok_s": round(o["tok_s"], 1), "vllm_tok_s": round(v["tok_s"], 1),
            "ratio": round(o["tok_s"] / v["tok_s"], 3), "ours_tpot_ms": round(o["tpot_ms"], 2),
            "vllm_tpot_ms": round(v["tpot_ms"], 2), "ours_ttft_ms": round(o["ttft_ms"], 1),
            "vllm_ttft_ms": round(v["ttft_ms"], 1), "client": o["client"],
            "rounds": {k: [{m: round(x, 2) for m, x in r.items() if m != "client"} for r in rs]
                       for k, rs in runs.items()}}


def main_streaming(a: argparse.Namespace) -> None:
    load_start = os.getloadavg()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.sizes.split(","):
            results[name] = stream_size(name, a, Path(tmp))
    out = {
        "mode": "streaming",
        "sizes": results,
        "workload": {"input_len": a.input_len, "output_len": a.output_len, "num_prompts": a.num_prompts,
                     "max_concurrency": a.concurrency},
        "vllm_eager": a.eager,
        "load_avg_start": [round(x, 2) for x in load_start],
        "load_avg_end": [round(x, 2) for x in os.getloadavg()],
        "targets_met": all(r["ratio"] >= 1.0 and r["ours_tpot_ms"] <= r["vllm_tpot_ms"] for r in results.values()),
    }
    print(json.dumps(out))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="tiny,25m")
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--eager", action="store_true", help="start vLLM with --enforce-eager (no compilation)")
    ap.add_argument("--streaming", action="store_true", help="vllm bench serve's streaming workload (issue 28)")
    ap.add_argument("--client", choices=("vllm", "own"), default="vllm",
                    help="--streaming load generator: vLLM's bench client, or ours reproducing it")
    ap.add_argument("--input-len", type=int, default=32)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--num-prompts", type=int, default=128)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--ours-threads", type=int, default=None,
                    help="vf-serve --threads (default: vf-serve's own choice for the model's size)")
    a = ap.parse_args()
    if a.streaming:
        main_streaming(a)
        return
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.sizes.split(","):
            results[name] = bench_size(name, a, Path(tmp))
    out = {
        "sizes": results,
        "requests": a.requests,
        "max_tokens": a.max_tokens,
        "vllm_eager": a.eager,
        "min_ratio": min(r["ratio"] for r in results.values()),
        "targets_met": all(r["ratio"] >= 1.0 for r in results.values()),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
