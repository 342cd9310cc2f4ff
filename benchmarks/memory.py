"""Memory benchmark: peak learner memory at a 152k vocabulary, full logits vs chunked logprobs (+ engine KV).

    python benchmarks/memory.py                      # about a minute on 2 cores, ~6 GB of RAM at peak
    python benchmarks/memory.py --shapes 4x256 --chunk 512

What it measures. One learner step, forward and backward, of a model whose vocabulary is
Qwen2's (152,064) and whose body is tiny (llama, hidden 64, 2 layers), so that the LM head
and the log-softmax dominate as they do at scale: the loss is Σ logp over the trained
positions of a batch of ``rows x seq`` tokens (prompts of 32 tokens shared by groups of 4,
the rest completion, all trained). Peaks are counted on the CPU by
`trainers.testing.memory.PeakMemory` (bytes of tensor storages alive at once, made by the
step; parameters and anything alive before it do not count, gradients do).

* ``old``: `trainers.grpo.learn.logprobs.full_logits_logps`, the path the trainer used before:
  the whole ``[rows, seq, vocab]`` logits, upcast to float32, ``logsumexp`` over them.
* ``new``: `trainers.grpo.learn.logprobs.completion_logps` with ``chunk_tokens = --chunk``: the
  head and log-softmax on the trained positions only, ``--chunk`` positions at a time,
  recomputed in backward.
* ``body``: the same step without logits (``trainers.testing.memory.body_peak_bytes``: the
  head on one position per row, the loss a linear function of the final hidden states), i.e.
  the model's own activations and gradients, vocabulary-sized weight gradient included.

Figures: the *excess* of a path is its peak minus the body's peak, the memory the logprobs
themselves need; it is reported in bytes per trained token and in *chunks*, the size of one
float32 ``[chunk_tokens x vocab]`` logits tensor. The new path's excess is also given with
the head and embeddings frozen (as under LoRA): trained, both the body and the new path make
vocabulary-sized weight gradients at different moments, which blurs the figure (it can even
come out below one chunk); frozen, it is the logits chunk and what surrounds it alone.
Target: new excess <= 1.5 chunks, both ways, for every batch shape (the old path's grows with the batch: about 4 float32 copies of all its logits).
The old path is skipped for shapes above ``--old-max-tokens`` tokens (its peak is linear in
tokens; the per-token figure of the smaller shapes holds).

Engine. When ``benchmarks/_engine_memory.py`` exists, its ``measure()`` is run and its
figures (the inference engine's KV cache) are added under ``engine``.

The LAST stdout line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from trainers.grpo.data.batch import TrainBatch, TrainRow, collate  # noqa: E402
from trainers.grpo.learn.logprobs import completion_logps, full_logits_logps  # noqa: E402
from trainers.testing.memory import body_peak_bytes, learner_peak_bytes  # noqa: E402

TARGET_CHUNKS = 1.5
PROMPT, GROUP = 32, 4


def build_model(vocab: int, hidden: int) -> Any:
    """A llama with Qwen2's vocabulary and a tiny body: the head is 97% of its weights."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    return LlamaForCausalLM(cfg)


def make_batch(rows: int, seq: int, vocab: int) -> TrainBatch:
    """``rows`` sequences of ``seq`` tokens: a 32-token prompt per group of 4, every completion token trained."""
    g = torch.Generator().manual_seed(rows * 1000 + seq)
    out: list[TrainRow] = []
    prompt: list[int] = []
    for i in range(rows):
        if i % GROUP == 0:
            prompt = torch.randint(0, vocab, (PROMPT,), generator=g).tolist()
        comp = torch.randint(0, vocab, (seq - PROMPT,), generator=g).tolist()
        out.append(TrainRow(prompt + comp, [0] * (PROMPT - 1) + [1] * (seq - PROMPT), [0.0] * (seq - 1), 0.0,
                            i // GROUP, False, seq - PROMPT, prompt_len=PROMPT))
    return collate(out, 0)


def measure_shape(model: Any, rows: int, seq: int, chunk: int, vocab: int, old_max_tokens: int) -> dict[str, Any]:
    """Body, new and (when small enough) old peaks of one batch shape, with excesses in chunks and per token."""
    batch = make_batch(rows, seq, vocab)
    trained = int(batch.loss_mask.sum())
    chunk_bytes = chunk * vocab * 4
    t0 = time.perf_counter()
    body = body_peak_bytes(model, batch)
    new = learner_peak_bytes(model, batch, lambda m, b: completion_logps(m, b, chunk_tokens=chunk)[0])
    fig: dict[str, Any] = {
        "rows": rows, "seq": seq, "trained_tokens": trained,
        "body_peak_mb": round(body / 2**20, 1),
        "new_peak_mb": round(new / 2**20, 1),
        "new_excess_chunks": round((new - body) / chunk_bytes, 3),
        "new_excess_bytes_per_token": round((new - body) / trained),
    }
    fig.update(frozen_head_figures(model, batch, chunk, chunk_bytes))
    t1 = time.perf_counter()
    fig["new_s"] = round(t1 - t0, 2)
    if rows * seq <= old_max_tokens:
        old = learner_peak_bytes(model, batch, lambda m, b: full_logits_logps(m, b)[0])
        fig.update({
            "old_peak_mb": round(old / 2**20, 1),
            "old_excess_chunks": round((old - body) / chunk_bytes, 3),
            "old_excess_bytes_per_token": round((old - body) / (rows * (seq - 1))),
            "old_over_new_excess": round((old - body) / max(new - body, 1), 1),
            "old_s": round(time.perf_counter() - t1, 2),
        })
    return fig


def frozen_head_figures(model: Any, batch: TrainBatch, chunk: int, chunk_bytes: int) -> dict[str, Any]:
    """The new path's excess with the (tied) head and embeddings frozen, as under LoRA.

    With them trained, both the body and the new path make vocabulary-sized weight gradients
    (``[vocab, hidden]``, 0.26 chunks each here) at different moments, which blurs the excess;
    frozen, the excess is the logits chunk and the hidden-state-sized tensors around it alone.
    """
    shared = [model.get_input_embeddings().weight, model.get_output_embeddings().weight]
    for p in shared:
        p.requires_grad_(False)
    try:
        body = body_peak_bytes(model, batch)
        new = learner_peak_bytes(model, batch, lambda m, b: completion_logps(m, b, chunk_tokens=chunk)[0])
    finally:
        for p in shared:
            p.requires_grad_(True)
    return {"frozen_head_new_excess_chunks": round((new - body) / chunk_bytes, 3)}


def engine_figures() -> dict[str, Any] | None:
    """``benchmarks/_engine_memory.py``'s ``measure()`` when that file exists, else None."""
    path = Path(__file__).with_name("_engine_memory.py")
    if not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location("_engine_memory", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = module.measure()
    return dict(result) if isinstance(result, dict) else {"result": result}


def parse_shapes(text: str) -> list[tuple[int, int]]:
    shapes = []
    for part in text.split(","):
        rows, seq = part.lower().split("x")
        shapes.append((int(rows), int(seq)))
    return shapes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", type=int, default=152_064)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--chunk", type=int, default=256, help="logprob chunk (positions whose logits exist at once)")
    ap.add_argument("--shapes", default="4x128,16x128", help="rows x seq, comma-separated")
    ap.add_argument("--old-max-tokens", type=int, default=2048, help="skip the old path above rows x seq tokens")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-engine", action="store_true", help="leave out benchmarks/_engine_memory.py")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    model = build_model(a.vocab, a.hidden)
    chunk_bytes = a.chunk * a.vocab * 4
    shapes = [measure_shape(model, r, s, a.chunk, a.vocab, a.old_max_tokens) for r, s in parse_shapes(a.shapes)]
    print(f"vocab {a.vocab}, hidden {a.hidden}, chunk {a.chunk} positions = {chunk_bytes / 2**20:.0f} MiB float32")
    print(f"{'rows x seq':>10} {'trained':>8} {'body MiB':>9} {'new excess':>11} {'frozen head':>12} "
          f"{'old excess':>11}  (chunks)")
    for f in shapes:
        old = f"{f['old_excess_chunks']:.2f}" if "old_excess_chunks" in f else "skipped"
        print(f"{f['rows']:>4} x {f['seq']:<4} {f['trained_tokens']:>8} {f['body_peak_mb']:>9} "
              f"{f['new_excess_chunks']:>11.2f} {f['frozen_head_new_excess_chunks']:>12.2f} {old:>11}")
    worst = max(max(f["new_excess_chunks"], f["frozen_head_new_excess_chunks"]) for f in shapes)
    result: dict[str, Any] = {
        "benchmark": "learner_memory",
        "vocab": a.vocab, "hidden": a.hidden, "chunk_tokens": a.chunk, "chunk_mb": round(chunk_bytes / 2**20, 1),
        "fp32_logits_bytes_per_token": a.vocab * 4,
        "shapes": shapes,
        "target_new_excess_chunks": TARGET_CHUNKS,
        "new_excess_chunks_max": worst,
        "frozen_head_new_excess_chunks_max": max(f["frozen_head_new_excess_chunks"] for f in shapes),
        "target_met": worst <= TARGET_CHUNKS,
    }
    if not a.no_engine:
        engine = engine_figures()
        if engine is not None:
            result["engine"] = engine
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
