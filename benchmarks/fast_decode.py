"""The engine's own decoding step (packed weights and plain) vs transformers' forward: time for a GRPO-sized batch.

    python benchmarks/fast_decode.py                 # 0.8M and 25M parameters, 8 rounds each
    python benchmarks/fast_decode.py --sizes tiny --rounds 20

One `InferenceEngine` per path over the same model object (llama, float32, CPU, one torch thread):
the engine's own step with oneDNN-packed projection weights (``packed_weights=True``; by default the
engine packs only where `verifiers.inference.engine.product_choice` measures it faster), the same
step with ``packed_weights=False`` (``F.linear`` of the modules' weights), and ``fast_decode=False``
(transformers' forward). Each round sends the trainer benchmark's batch (8 chat prompts x 8
samples, exactly 16 new tokens each: ``min_tokens`` = ``max_tokens`` = 16, temperature 1) to each
engine in turn, so a moment of load on this shared machine hits every path alike. Reported per
size: the median seconds per batch on each path (``fast_s``, ``plain_s``, ``transformers_s``),
``ratio`` (fast / transformers), ``packed_ratio`` (fast / plain), and whether the paths agreed on
greedy tokens and log-probabilities for the same prompts (they must:
`tests/inference/test_fast_decode.py`). The last stdout line is one JSON object.

    python benchmarks/fast_decode.py --device cuda --sizes 250m --autocast   # on a GPU (issue 39)
    python benchmarks/fast_decode.py --device cuda --sizes 250m,1b --dtype bfloat16

On a GPU (``--device cuda``) it compares the engine alone with transformers' ``model.generate``
on one model object moved to the GPU (``--dtype``, float32 by default; ``--autocast``: both
sides under bf16 autocast, the engine's thread included): the engine gets the 8 prompts as
8 requests of ``n=8`` (128 tokens each by default, ``min_tokens`` = ``max_tokens``, temperature 1,
log-probabilities on, as the trainer asks), ``generate`` the padded 64-row batch (each prompt 8
times, ``min_new_tokens`` = ``max_new_tokens``, ``do_sample=True``, no top-k/top-p). Both are timed
round after round with the device synchronized; reported per size: ``engine_s`` and ``hf_s``
(medians), ``engine_step_ms`` / ``hf_step_ms`` (batch seconds / tokens, prefill included),
``hf_over_engine`` (> 1: the engine is faster), the engine's ``decode_path``, and how many of the 8
prompts' greedy completions the two agree on (``greedy_rows_equal``; information, not a check:
GPU kernels and bf16 round differently). ``--sizes`` also takes ``250m`` and ``1b`` (the trainer
benchmark's GPU shapes).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from a checkout without an editable install
    sys.path.insert(0, str(ROOT))

SIZES = {
    "tiny": {"hidden_size": 128, "intermediate_size": 384, "num_hidden_layers": 4, "num_attention_heads": 4,
             "num_key_value_heads": 2},
    "25m": {"hidden_size": 512, "intermediate_size": 1536, "num_hidden_layers": 8, "num_attention_heads": 8,
            "num_key_value_heads": 4},
    "250m": {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 16, "num_attention_heads": 16,
             "num_key_value_heads": 8},
    "1b": {"hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22, "num_attention_heads": 32,
           "num_key_value_heads": 4},
}
PROMPTS, SAMPLES, TOKENS = 8, 8, 16
GPU_TOKENS = 128  # tokens per completion on cuda: the trainer benchmark's GPU workload


async def _batch(engine: Any, prompts: list[list[int]], params: Any) -> list[Any]:
    return await _batch_n(engine, prompts, params, SAMPLES)


async def _batch_n(engine: Any, prompts: list[list[int]], params: Any, n: int) -> list[Any]:
    return await asyncio.gather(*[engine.generate(p, params, n=n) for p in prompts])


def measure(size: str, rounds: int) -> dict[str, Any]:
    import torch

    from verifiers.inference.engine import InferenceEngine
    from verifiers.inference.engine.sampling import SamplingParams
    from verifiers.models.tiny import TinyModelSpec, build_tiny_model

    model, tok = build_tiny_model(TinyModelSpec(arch="llama", **SIZES[size]))
    texts = [tok.apply_chat_template([{"role": "user", "content": f"Say {c}"}], add_generation_prompt=True,
                                     tokenize=False) for c in "abcdefgh"[:PROMPTS]]
    prompts = [tok.encode(t, add_special_tokens=False) for t in texts]
    sampled = SamplingParams(temperature=1.0, max_tokens=TOKENS, min_tokens=TOKENS, logprobs=True)
    greedy = SamplingParams(temperature=0.0, max_tokens=TOKENS, ignore_eos=True, logprobs=True)
    engines = {"fast": InferenceEngine(model, tok, fast_decode=True, packed_weights=True).start(),
               "plain": InferenceEngine(model, tok, fast_decode=True, packed_weights=False).start(),
               "transformers": InferenceEngine(model, tok, fast_decode=False).start()}
    try:
        if not engines["fast"].fast_decoding:
            raise SystemExit(f"the fast path does not apply here: {engines['fast'].decode_path}")
        same = {}
        for name, engine in engines.items():
            outs = asyncio.run(_batch(engine, prompts, greedy))
            same[name] = [(list(o.outputs[0].token_ids), list(o.outputs[0].logprobs)) for o in outs]
            asyncio.run(_batch(engine, prompts, sampled))  # warm-up
        tokens_equal = all([t for t, _ in same[name]] == [t for t, _ in same["transformers"]]
                           for name in ("fast", "plain"))
        lp_diff = max(abs(a - b) for name in ("fast", "plain")
                      for (_, x), (_, y) in zip(same[name], same["transformers"], strict=True)
                      for a, b in zip(x, y, strict=True))
        times: dict[str, list[float]] = {name: [] for name in engines}
        for _ in range(rounds):
            for name, engine in engines.items():
                t0 = time.perf_counter()
                asyncio.run(_batch(engine, prompts, sampled))
                times[name].append(time.perf_counter() - t0)
    finally:
        for engine in engines.values():
            engine.stop()
    fast, plain, slow = (statistics.median(times[name]) for name in ("fast", "plain", "transformers"))
    params = sum(p.numel() for p in model.parameters())
    print(f"{size} ({params / 1e6:.2f}M params): {PROMPTS}x{SAMPLES} completions of {TOKENS} tokens in "
          f"{fast * 1e3:.1f} ms with the engine's own step and packed weights, {plain * 1e3:.1f} ms without "
          f"packing, {slow * 1e3:.1f} ms with transformers' forward (ratio {fast / slow:.3f}, packed "
          f"{fast / plain:.3f}); greedy tokens equal: {tokens_equal}, max logprob difference {lp_diff:.2e}",
          flush=True)
    return {"params": params, "fast_s": fast, "plain_s": plain, "transformers_s": slow, "ratio": fast / slow,
            "packed_ratio": fast / plain, "tokens_equal": tokens_equal, "max_logprob_diff": lp_diff,
            "torch_threads": torch.get_num_threads(), "fast_rounds_s": times["fast"],
            "plain_rounds_s": times["plain"], "transformers_rounds_s": times["transformers"]}


def _prompts(tok: Any) -> list[list[int]]:
    texts = [tok.apply_chat_template([{"role": "user", "content": f"Say {c}"}], add_generation_prompt=True,
                                     tokenize=False) for c in "abcdefgh"[:PROMPTS]]
    return [tok.encode(t, add_special_tokens=False) for t in texts]


def _bf16_autocast(on: bool, device: str = "cuda") -> contextlib.AbstractContextManager[Any]:
    import torch

    return torch.autocast(device, dtype=torch.bfloat16) if on else contextlib.nullcontext()


def _engine_under_autocast(engine: Any, device: str) -> None:
    """Run the engine's decoding thread under bf16 autocast (autocast is per thread: the caller's
    does not reach it). Wraps the thread's target before `start`."""
    run = getattr(engine, "_run", None)
    if run is None:
        raise SystemExit("--autocast: InferenceEngine has no _run (its thread target) to wrap any more; "
                         "update _engine_under_autocast in benchmarks/fast_decode.py")

    def under_autocast() -> None:
        with _bf16_autocast(True, device):
            run()

    engine._run = under_autocast


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def measure_gpu(size: str, rounds: int, dtype_name: str, autocast: bool, tokens: int,
                device: str = "cuda") -> dict[str, Any]:
    """The engine alone vs ``model.generate`` on the same 64-row batch, on the GPU (see the module doc;
    ``device="cpu"`` runs the same code on the CPU, a dry run of the script's GPU path)."""
    import torch
    from transformers import GenerationConfig

    from verifiers.inference.engine import InferenceEngine
    from verifiers.inference.engine.sampling import SamplingParams
    from verifiers.models.tiny import TinyModelSpec, build_tiny_model

    print(f"{size}: building the model (random init on the CPU), then to {device} as {dtype_name}", flush=True)
    model, tok = build_tiny_model(TinyModelSpec(arch="llama", **SIZES[size]))
    model = model.to(device=device, dtype=getattr(torch, dtype_name)).eval()
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    params = sum(p.numel() for p in model.parameters())
    prompts = _prompts(tok)
    rows = [p for p in prompts for _ in range(SAMPLES)]
    width, pad = max(len(r) for r in rows), int(tok.pad_token_id)
    input_ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=device)
    attention_mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=device)
    eos = model.generation_config.eos_token_id
    sampled_cfg = GenerationConfig(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, min_new_tokens=tokens,
                                   max_new_tokens=tokens, pad_token_id=pad, eos_token_id=eos)
    greedy_cfg = GenerationConfig(do_sample=False, min_new_tokens=tokens, max_new_tokens=tokens, pad_token_id=pad,
                                  eos_token_id=eos)

    def hf(ids: Any, mask: Any, cfg: Any) -> Any:
        with torch.no_grad(), _bf16_autocast(autocast, device):
            return model.generate(input_ids=ids, attention_mask=mask, generation_config=cfg)[:, ids.shape[1]:]

    sampled = SamplingParams(temperature=1.0, max_tokens=tokens, min_tokens=tokens, logprobs=True)
    greedy = SamplingParams(temperature=0.0, max_tokens=tokens, min_tokens=tokens)
    engine = InferenceEngine(model, tok)  # the defaults the trainer's embedded engine uses
    if autocast:
        _engine_under_autocast(engine, device)
    engine.start()
    print(f"{size} ({params / 1e6:.1f}M params): engine decoding with {engine.decode_path}", flush=True)

    def timed(fn: Any) -> tuple[float, Any]:
        sync()
        t = time.perf_counter()
        out = fn()
        sync()
        return time.perf_counter() - t, out

    try:
        print(f"{size}: greedy agreement and warm-up", flush=True)
        hf_greedy = hf(input_ids[::SAMPLES], attention_mask[::SAMPLES], greedy_cfg).tolist()  # each prompt once
        outs = asyncio.run(_batch_n(engine, prompts, greedy, 1))
        engine_greedy = [list(o.outputs[0].token_ids) for o in outs]
        equal = sum(a == b for a, b in zip(engine_greedy, hf_greedy, strict=True))
        prefix = statistics.fmean(_common_prefix(a, b) for a, b in zip(engine_greedy, hf_greedy, strict=True))
        timed(lambda: asyncio.run(_batch(engine, prompts, sampled)))  # warm-up
        timed(lambda: hf(input_ids, attention_mask, sampled_cfg))
        times: dict[str, list[float]] = {"engine": [], "hf": []}
        lengths_ok = True
        for k in range(rounds):
            s_engine, outs = timed(lambda: asyncio.run(_batch(engine, prompts, sampled)))
            s_hf, new = timed(lambda: hf(input_ids, attention_mask, sampled_cfg))
            lengths_ok &= all(len(c.token_ids) == tokens for o in outs for c in o.outputs)
            lengths_ok &= len(outs) * SAMPLES == new.shape[0] and new.shape[1] == tokens
            times["engine"].append(s_engine)
            times["hf"].append(s_hf)
            print(f"{size}: round {k + 1} of {rounds}: engine {s_engine:.3f} s, generate {s_hf:.3f} s", flush=True)
    finally:
        engine.stop()
    path = engine.decode_path
    e, h = statistics.median(times["engine"]), statistics.median(times["hf"])
    print(f"{size} ({params / 1e6:.1f}M params): {PROMPTS}x{SAMPLES} completions of {tokens} tokens in {e:.3f} s "
          f"with the engine ({e / tokens * 1e3:.2f} ms a step), {h:.3f} s with model.generate "
          f"({h / tokens * 1e3:.2f} ms a step): generate / engine {h / e:.3f}; greedy rows equal {equal} of "
          f"{len(prompts)} (mean common prefix {prefix:.1f} tokens); every completion {tokens} tokens: {lengths_ok}",
          flush=True)
    return {"params": params, "engine_s": e, "hf_s": h, "hf_over_engine": h / e,
            "engine_step_ms": e / tokens * 1e3, "hf_step_ms": h / tokens * 1e3, "decode_path": path,
            "greedy_rows_equal": equal, "greedy_common_prefix_tokens": prefix, "lengths_ok": lengths_ok,
            "engine_rounds_s": times["engine"], "hf_rounds_s": times["hf"]}


def main_gpu(args: argparse.Namespace, sizes: list[str]) -> int:
    import torch
    import transformers

    if not torch.cuda.is_available():
        raise SystemExit(f"--device cuda: torch {torch.__version__} (CUDA build {torch.version.cuda}) sees no GPU here")
    tokens = args.max_tokens or GPU_TOKENS
    name = torch.cuda.get_device_name(0)
    print(f"device: cuda:0 {name} (torch {torch.__version__}, CUDA {torch.version.cuda}, transformers "
          f"{transformers.__version__}); {args.dtype} weights, bf16 autocast: {args.autocast}, {tokens} tokens",
          flush=True)
    torch.set_num_threads(args.threads)
    results = {}
    for size in sizes:
        results[size] = measure_gpu(size, args.rounds, args.dtype, args.autocast, tokens)
        gc.collect()  # the size's model and engine are garbage now: free their memory for the next size
        torch.cuda.empty_cache()
    print(json.dumps({"device": "cuda", "gpu_name": name, "torch_version": torch.__version__,
                      "transformers_version": transformers.__version__, "dtype": args.dtype,
                      "autocast": args.autocast, "tokens": tokens, "prompts": PROMPTS, "samples": SAMPLES,
                      "sizes": results, "rounds": args.rounds}))
    return 0 if all(r["lengths_ok"] for r in results.values()) else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="tiny,25m", help="comma-separated: tiny (0.8M), 25m, 250m, 1b")
    ap.add_argument("--rounds", type=int, default=8, help="timed batches per path and size (default 8)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1, as trainer_step.py)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="cpu: the engine's paths against each other (default); cuda: the engine vs model.generate")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                    help="cuda only: the model's weights (default float32)")
    ap.add_argument("--autocast", action="store_true", help="cuda only: both sides under bf16 autocast")
    ap.add_argument("--max-tokens", type=int, default=None,
                    help=f"cuda only: tokens per completion (default {GPU_TOKENS}; the CPU comparison runs {TOKENS})")
    args = ap.parse_args(argv)
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    unknown = [s for s in sizes if s not in SIZES]
    if unknown or args.rounds < 1 or args.threads < 1:
        ap.error(f"--sizes takes {', '.join(SIZES)}; --rounds and --threads must be >= 1")
    if args.device == "cpu" and (args.dtype != "float32" or args.autocast or args.max_tokens is not None):
        ap.error("--dtype, --autocast and --max-tokens are for --device cuda (the CPU comparison is float32, "
                 f"{TOKENS} tokens)")
    if args.max_tokens is not None and args.max_tokens < 1:
        ap.error("--max-tokens must be >= 1")
    if args.device == "cuda":
        return main_gpu(args, sizes)
    import torch

    torch.set_num_threads(args.threads)
    results = {size: measure(size, args.rounds) for size in sizes}
    print(json.dumps({"sizes": results, "rounds": args.rounds}))
    return 0 if all(r["tokens_equal"] for r in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
