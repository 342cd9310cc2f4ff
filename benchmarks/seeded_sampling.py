"""The engine's seeded sampler at a real model's vocabulary: this tree against another commit's, in one run.

    python benchmarks/seeded_sampling.py                       # against 5ddbd34~1 (the whole batch's noise)
    python benchmarks/seeded_sampling.py --ref HEAD~3 --rows 8 64 --vocab 49152 262144

A seeded request draws its token by Gumbel-max from noise that is a hash of (seed, position, token
id) (`verifiers.inference.engine.sampling`): a dozen integer passes over every row's whole
vocabulary, every decoding step. This times ``sample()`` on seeded rows of random logits (the
cost does not depend on their values) for each vocabulary and batch size, the ``--ref`` commit's
``sampling.py`` (read with ``git show``, imported as its own module) alternated with this tree's,
and checks that both pick the same tokens. Reported per case: each side's median milliseconds a
step and their ratio. The last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:  # run from a checkout without an editable install
    sys.path.insert(0, str(ROOT))

SAMPLING = "verifiers/inference/engine/sampling.py"


def module_at(ref: str, workdir: Path) -> ModuleType:
    """``sampling.py`` as it was at ``ref``, imported under its own name."""
    text = subprocess.run(["git", "show", f"{ref}:{SAMPLING}"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    path = workdir / "sampling_ref.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("sampling_ref", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def time_side(mod: ModuleType, logits: Any, rows: int, repeats: int) -> tuple[list[float], Any]:
    """Milliseconds of ``repeats`` seeded ``sample()`` calls on ``logits``, and the last call's tokens."""
    seeded = [mod.RowSampling(temperature=1.0, top_p=1.0, top_k=-1, min_p=0.0, repetition_penalty=1.0, seed=7,
                              stream=i) for i in range(rows)]
    params = mod.batch_params(seeded, logits.shape[1], logits.device)
    positions = list(range(rows))
    out, times = None, []
    for _ in range(repeats):
        start = time.perf_counter()
        out = mod.sample(logits, params, None, positions)
        times.append((time.perf_counter() - start) * 1e3)
    return times, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ref", default="5ddbd34~1", help="the commit to compare with (default: before the chunked noise)")
    ap.add_argument("--rows", type=int, nargs="+", default=[8, 64], help="seeded rows in a step")
    ap.add_argument("--vocab", type=int, nargs="+", default=[49_152, 262_144],
                    help="vocabulary sizes (SmolLM2's, Gemma 3's)")
    ap.add_argument("--repeats", type=int, default=7, help="timed calls per side per round")
    ap.add_argument("--rounds", type=int, default=3, help="alternations of the two sides")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the engine's default in training)")
    args = ap.parse_args(argv)

    import torch

    from verifiers.inference.engine import sampling as ours

    torch.set_num_threads(args.threads)
    cases: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        ref = module_at(args.ref, Path(tmp))
        for vocab in args.vocab:
            for rows in args.rows:
                logits = torch.randn(rows, vocab, generator=torch.Generator().manual_seed(vocab + rows)) * 3
                before: list[float] = []
                after: list[float] = []
                same = True
                for _ in range(args.rounds):
                    t_ref, tok_ref = time_side(ref, logits, rows, args.repeats)
                    t_ours, tok_ours = time_side(ours, logits, rows, args.repeats)
                    before += t_ref[1:]  # the first call of a side warms its allocations
                    after += t_ours[1:]
                    same = same and bool(torch.equal(tok_ref, tok_ours))
                case = {"vocab": vocab, "rows": rows, "ref_ms": statistics.median(before),
                        "ours_ms": statistics.median(after), "same_tokens": same}
                case["speedup"] = case["ref_ms"] / case["ours_ms"]
                cases.append(case)
                print(f"vocab {vocab:>7}, {rows:>3} rows: {args.ref} {case['ref_ms']:8.1f} ms, this tree "
                      f"{case['ours_ms']:8.1f} ms, {case['speedup']:.2f}x, same tokens {same}", flush=True)
    print(json.dumps({"ref": args.ref, "threads": args.threads, "cases": cases,
                      "same_tokens": all(c["same_tokens"] for c in cases)}))
    return 0 if all(c["same_tokens"] for c in cases) else 1


if __name__ == "__main__":
    raise SystemExit(main())
