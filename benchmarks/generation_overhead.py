"""The trainer's generation against its own engine alone: what the rollout path adds around decoding.

    python benchmarks/generation_overhead.py                  # 25M parameters, 4 measured steps
    python benchmarks/generation_overhead.py --size 0.8m --steps 6

`benchmarks/trainer_step.py`'s workload (letter-repeat, 8 prompts x 8 samples, exactly
``--max-tokens`` tokens each, one torch thread) trained by our trainer. After each step's batch
is taken, the SAME batch is sent straight to the trainer's own engine (the 8 chat prompts as
``n=8`` requests, same sampling settings, no client, no environment, no scoring): the engine
alone, on the same weights, in the same process, a moment later. Reported per step and as
medians: ``generation_s`` (the trainer's, from asking for the batch to having it scored and
assembled), ``engine_busy_s`` (the time the engine spent in decoding steps during it; the first
step after an optimizer step also repacks the weights), ``alone_s`` (the engine alone), and
``ratio`` = generation / alone (target <= 1.10). The last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:  # run from a checkout without an editable install
    sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import trainer_step  # noqa: E402  (the shared workload and model builder)

TARGET = 1.10


class EngineClock:
    """Sums the engine's time inside its decoding steps (wraps ``engine._step`` on the instance)."""

    def __init__(self, engine: Any) -> None:
        self.busy = 0.0
        step = engine._step

        def timed(*a: Any, **k: Any) -> Any:
            t = time.perf_counter()
            try:
                return step(*a, **k)
            finally:
                self.busy += time.perf_counter() - t

        engine._step = timed


def alone(engine: Any, prompts: list[list[int]], params: Any, samples: int) -> float:
    """Seconds for the batch sent straight to ``engine`` (from a thread with its own event loop)."""

    async def batch() -> list[Any]:
        return await asyncio.gather(*[engine.generate(p, params, n=samples) for p in prompts])

    t = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, batch()).result()
    return time.perf_counter() - t


def run(work: dict[str, Any], model_dir: Path, out_dir: Path) -> list[dict[str, float]]:
    from rich.console import Console

    from trainers.grpo.config import TrainConfig
    from trainers.grpo.trainer import GRPOTrainer
    from verifiers.inference.engine.sampling import SamplingParams

    steps: list[dict[str, float]] = []
    tokens = work["max_tokens"]

    class Measured(GRPOTrainer):
        def setup(self) -> None:
            super().setup()
            extra = {**self.sampling_args.get("extra_body", {}), "min_tokens": tokens}
            self.sampling_args = {**self.sampling_args, "extra_body": extra}
            self.generator.sampling_args = dict(self.sampling_args)
            self._clock = EngineClock(self.sync.engine)
            tok = self.tokenizer
            rows = trainer_step.training_rows(work["env_args"])[: work["prompts_per_step"]]
            self._prompts = [tok.encode(tok.apply_chat_template(r["prompt"], add_generation_prompt=True,
                                                                tokenize=False), add_special_tokens=False)
                             for r in rows]

        def _take_batch(self) -> Any:
            self._clock.busy = 0.0
            t = time.perf_counter()
            out = super()._take_batch()
            generation, busy = time.perf_counter() - t, self._clock.busy
            params = SamplingParams(temperature=1.0, top_p=1.0, max_tokens=tokens, min_tokens=tokens, logprobs=True)
            engine_s = alone(self.sync.engine, self._prompts, params, work["num_generations"])
            steps.append({"generation_s": generation, "engine_busy_s": busy, "alone_s": engine_s})
            print(f"step {len(steps)}: trainer generation {generation:.3f} s (engine busy {busy:.3f} s), "
                  f"engine alone {engine_s:.3f} s, ratio {generation / engine_s:.3f}", flush=True)
            return out

    cfg = TrainConfig(model=str(model_dir), env_id=trainer_step.ENV_ID, env_args=work["env_args"],
                      output_dir=str(out_dir), seed=0, algorithm="grpo", prompts_per_step=work["prompts_per_step"],
                      num_generations=work["num_generations"], max_steps=work["warmup_steps"] + work["measured_steps"],
                      max_tokens=tokens, temperature=1.0, top_p=1.0, learning_rate=1e-5, lr_scheduler="constant",
                      torch_threads=work["threads"], num_batches_ahead=0, num_sample_completions=0, plot=False,
                      progress=False)
    Measured(cfg, console=Console(quiet=True)).train()
    return steps[work["warmup_steps"]:]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", choices=["0.8m", "25m", "104m"], default="25m")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=16)
    args = ap.parse_args(argv)
    bench = trainer_step.parse_args(["--no-trl", "--size", args.size, "--warmup", str(args.warmup),
                                     "--steps", str(args.steps), "--max-tokens", str(args.max_tokens)])
    work = trainer_step.workload(bench)
    with tempfile.TemporaryDirectory(prefix="vf-gen-overhead-") as tmp:
        model_dir = trainer_step.build_model(work["model"], Path(tmp) / "model")
        steps = run(work, model_dir, Path(tmp) / "out")
    med = {k: statistics.median(s[k] for s in steps) for k in ("generation_s", "engine_busy_s", "alone_s")}
    ratio = statistics.median(s["generation_s"] / s["alone_s"] for s in steps)
    print(f"median: trainer generation {med['generation_s']:.3f} s, engine busy {med['engine_busy_s']:.3f} s, "
          f"engine alone {med['alone_s']:.3f} s; ratio {ratio:.3f} (target <= {TARGET})", flush=True)
    print(json.dumps({**med, "ratio": ratio, "target_ratio": TARGET, "pass": ratio <= TARGET, "size": args.size,
                      "max_tokens": args.max_tokens, "steps": steps}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
