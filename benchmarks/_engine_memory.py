"""Engine KV-cache memory: peak cache bytes for mixed-length requests, token budget vs row-count admission.

    python benchmarks/_engine_memory.py        # a few seconds on one CPU core

Workload: ``requests`` greedy requests with prompts of 4..``max_prompt`` tokens and max_tokens of
8..``max_new`` (deterministic mix), all submitted while the engine is held, on a tiny llama.

* ``old``: the engine at git ``BASELINE_COMMIT`` (before the slot cache) (loaded from ``git show``), which admits up
  to ``max_batch_size`` rows whatever their length and concatenates a left-padded DynamicCache.
  Its bytes are the sum of the cache's K/V tensors' ``nbytes`` after every step (the transient
  copy ``torch.cat`` makes during a step is not counted, so this understates the old peak).
* ``new``: this engine with ``max_kv_tokens = budget``; bytes are `SlotKV`'s buffers, sampled after
  every step and at every (re)allocation (``peak_kv_bytes``).

Both run the same requests; ``same_outputs`` checks that the tokens agree. The last line printed
is one JSON object.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# The last commit with the old engine (row-count admission, concatenated DynamicCache): the baseline.
BASELINE_COMMIT = "73e7d849e06f7ddc663c06cad69a106865cf47ef"


def _old_engine_class() -> Any:
    """The engine module as of `BASELINE_COMMIT`, or None when git or that commit is unavailable."""
    try:
        src = subprocess.run(["git", "show", f"{BASELINE_COMMIT}:verifiers/inference/engine.py"], cwd=ROOT, check=True,
                             capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    path = Path(tempfile.mkdtemp()) / "_old_engine.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("_old_engine", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["_old_engine"] = mod
    spec.loader.exec_module(mod)
    return mod.InferenceEngine


def _workload(requests: int, max_prompt: int, max_new: int) -> list[tuple[list[int], int]]:
    out = []
    for i in range(requests):
        plen = 4 + (i * 37) % (max_prompt - 3)
        new = 8 + (i * 53) % (max_new - 7)
        out.append(([5 + (i + j) % 60 for j in range(plen)], new))
    return out


def _run(engine: Any, jobs: list[tuple[list[int], int]], kv_bytes: Any) -> tuple[list[list[int]], int, float]:
    from verifiers.inference.engine.sampling import SamplingParams

    peak = 0
    step = engine._step

    def sampled(*args: Any) -> None:
        nonlocal peak
        step(*args)
        peak = max(peak, kv_bytes(engine))

    engine._step = sampled
    t0 = time.perf_counter()
    with engine, ThreadPoolExecutor(len(jobs)) as pool:
        with engine.paused():
            futures = [pool.submit(engine.generate_sync, p, SamplingParams(temperature=0, max_tokens=m,
                                                                          ignore_eos=True)) for p, m in jobs]
            time.sleep(0.2)
        outs = [f.result(timeout=600).outputs[0].token_ids for f in futures]
    return outs, peak, time.perf_counter() - t0


def _old_bytes(engine: Any) -> int:
    batch = engine._batch
    if batch is None:
        return 0
    return sum(t.numel() * t.element_size() for layer in batch.cache.layers for t in (layer.keys, layer.values))


def _new_bytes(engine: Any) -> int:
    return max(engine._decoder.kv.nbytes(), engine._decoder.kv.peak_bytes)


def measure(vocab: int = 0, requests: int = 48, max_prompt: int = 64, max_new: int = 96, budget: int = 2048,
            max_batch_size: int = 32, hidden: int = 64, layers: int = 2) -> dict[str, Any]:
    """Peak KV bytes of the old and new engines on one mixed workload (``vocab`` 0: the tokenizer's)."""
    import torch

    from verifiers.inference.engine import InferenceEngine
    from verifiers.models.tiny import TinyModelSpec, build_tiny_model

    torch.set_num_threads(1)
    model, tok = build_tiny_model(TinyModelSpec(hidden_size=hidden, num_hidden_layers=layers,
                                                intermediate_size=3 * hidden))
    base = model.get_input_embeddings().weight.shape[0]
    if vocab > base:  # extra ids copy existing rows, so greedy picks the original id (argmax takes the first)
        model.resize_token_embeddings(vocab)
        with torch.no_grad():
            w = model.get_input_embeddings().weight
            w[base:] = w[torch.arange(base, vocab) % base]
    jobs = _workload(requests, max_prompt, max_new)
    new_engine = InferenceEngine(model, tok, max_batch_size=max_batch_size, max_kv_tokens=budget)
    new_outs, new_peak, new_s = _run(new_engine, jobs, _new_bytes)
    result: dict[str, Any] = {
        "benchmark": "engine_kv_memory", "requests": requests, "max_prompt": max_prompt, "max_new": max_new,
        "max_batch_size": max_batch_size, "max_kv_tokens": budget,
        "bytes_per_kv_token": 2 * layers * 2 * (hidden // 4) * 4,
        "new_peak_kv_bytes": new_peak, "new_max_batch": new_engine.stats["max_batch"],
        "new_steps": new_engine.stats["steps"], "new_seconds": round(new_s, 3),
    }
    result["budget_bytes"] = budget * result["bytes_per_kv_token"]
    old_cls = _old_engine_class()
    if old_cls is not None:
        old_engine = old_cls(model, tok, max_batch_size=max_batch_size)
        old_outs, old_peak, old_s = _run(old_engine, jobs, _old_bytes)
        result.update(old_peak_kv_bytes=old_peak, old_max_batch=old_engine.stats["max_batch"],
                      old_steps=old_engine.stats["steps"], old_seconds=round(old_s, 3),
                      same_outputs=old_outs == new_outs,
                      peak_ratio_new_over_old=round(new_peak / max(old_peak, 1), 3))
    return result


if __name__ == "__main__":
    print(json.dumps(measure()))
