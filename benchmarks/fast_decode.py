"""The engine's own decoding step (packed weights and plain) vs transformers' forward: time for a GRPO-sized batch.

    python benchmarks/fast_decode.py                 # 0.8M and 25M parameters, 8 rounds each
    python benchmarks/fast_decode.py --sizes tiny --rounds 20

One `InferenceEngine` per path over the same model object (llama, float32, CPU, one torch thread):
the engine's own step with oneDNN-packed projection weights (the default), the same step with
``packed_weights=False`` (``F.linear`` of the modules' weights), and ``fast_decode=False``
(transformers' forward). Each round sends the trainer benchmark's batch (8 chat prompts x 8
samples, exactly 16 new tokens each: ``min_tokens`` = ``max_tokens`` = 16, temperature 1) to each
engine in turn, so a moment of load on this shared machine hits every path alike. Reported per
size: the median seconds per batch on each path (``fast_s``, ``plain_s``, ``transformers_s``),
``ratio`` (fast / transformers), ``packed_ratio`` (fast / plain), and whether the paths agreed on
greedy tokens and log-probabilities for the same prompts (they must:
`tests/inference/test_fast_decode.py`). The last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
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
}
PROMPTS, SAMPLES, TOKENS = 8, 8, 16


async def _batch(engine: Any, prompts: list[list[int]], params: Any) -> list[Any]:
    return await asyncio.gather(*[engine.generate(p, params, n=SAMPLES) for p in prompts])


def measure(size: str, rounds: int) -> dict[str, Any]:
    import torch

    from verifiers.inference.engine import InferenceEngine
    from verifiers.inference.sampling import SamplingParams
    from verifiers.inference.tiny import TinyModelSpec, build_tiny_model

    model, tok = build_tiny_model(TinyModelSpec(arch="llama", **SIZES[size]))
    texts = [tok.apply_chat_template([{"role": "user", "content": f"Say {c}"}], add_generation_prompt=True,
                                     tokenize=False) for c in "abcdefgh"[:PROMPTS]]
    prompts = [tok.encode(t, add_special_tokens=False) for t in texts]
    sampled = SamplingParams(temperature=1.0, max_tokens=TOKENS, min_tokens=TOKENS, logprobs=True)
    greedy = SamplingParams(temperature=0.0, max_tokens=TOKENS, ignore_eos=True, logprobs=True)
    engines = {"fast": InferenceEngine(model, tok, fast_decode=True).start(),
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="tiny,25m", help="comma-separated: tiny (0.8M), 25m")
    ap.add_argument("--rounds", type=int, default=8, help="timed batches per path and size (default 8)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1, as trainer_step.py)")
    args = ap.parse_args(argv)
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    unknown = [s for s in sizes if s not in SIZES]
    if unknown or args.rounds < 1 or args.threads < 1:
        ap.error(f"--sizes takes {', '.join(SIZES)}; --rounds and --threads must be >= 1")
    import torch

    torch.set_num_threads(args.threads)
    results = {size: measure(size, args.rounds) for size in sizes}
    print(json.dumps({"sizes": results, "rounds": args.rounds}))
    return 0 if all(r["tokens_equal"] for r in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
