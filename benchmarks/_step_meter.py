"""The learner's meters for `benchmarks/trainer_step.py`: the machine's matmul peak (CPU or GPU), a
step's training FLOPs, the learner's phase timer and the figures made from them.

Split from trainer_step.py (which re-exports every name) to keep that script under the module size limit.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

GPU_PEAK_N = 8192  # the GPU peak's square matmul side

def peak_tflops(threads: int, n: int = 2048, repeats: int = 10) -> float:
    """The machine's float32 matmul rate with ``threads`` torch threads: ``[n, n] @ [n, n]``
    (2 n^3 FLOPs), the best of ``repeats`` products after one warm-up, by whichever of PyTorch's
    ``mm`` and oneDNN's product of a prepacked matrix (what the learner and the engine run) is faster
    here: on an AMD EPYC with AVX-512 the second is about twice the first.

    Each product is timed in wall time and in process CPU time (divided by ``threads``); the
    faster reading counts, so that a core taken by other work for a moment (wall time, on a
    shared machine) or OpenMP's spin-waiting (CPU time) does not lower the limit measured.
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a, b = torch.randn(n, n), torch.randn(n, n)
        out = torch.empty(n, n)
        products = [lambda: torch.mm(a, b, out=out)]
        if torch.backends.mkldnn.is_available():
            from verifiers.inference.engine.projections import pack, packed_product

            packed = pack(b.t().contiguous(), n)
            products.append(lambda: packed_product(a, packed, None))
        best = float("inf")
        for product in products:
            product()
            for _ in range(repeats):
                t, c = time.perf_counter(), time.process_time()
                product()
                best = min(best, time.perf_counter() - t, (time.process_time() - c) / threads)
    finally:
        torch.set_num_threads(before)
    return 2 * n**3 / best / 1e12


def gpu_peak_tflops(kind: str, n: int = GPU_PEAK_N, repeats: int = 20) -> float:
    """The GPU's dense matmul rate: ``[n, n] @ [n, n]`` (2 n^3 FLOPs) in bf16 (``kind="bf16"``) or
    float32 with TF32 off (``"float32"``: what a float32 run computes in, TF32 being off by
    default), the best of ``repeats`` products after ten warm-ups, each timed by CUDA events.

    Measured in the same run as the step it divides, so MFU is against this GPU at its current
    clocks, not a datasheet figure (which for bf16 usually counts sparsity or boost clocks).
    """
    import torch

    dtype = {"bf16": torch.bfloat16, "float32": torch.float32}[kind]
    try:
        before: str | None = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision("highest")  # float32: no TF32 (no effect on bf16 products)
    except RuntimeError as exc:  # torch refuses when the newer per-backend TF32 settings were used
        print(f"note: float32 matmul precision left as it is ({exc})", flush=True)
        before = None
    try:
        a = torch.randn(n, n, device="cuda", dtype=dtype)
        b = torch.randn(n, n, device="cuda", dtype=dtype)
        out = torch.empty(n, n, device="cuda", dtype=dtype)
        for _ in range(10):
            torch.mm(a, b, out=out)
        torch.cuda.synchronize()
        best = float("inf")
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.mm(a, b, out=out)
            end.record()
            end.synchronize()
            best = min(best, start.elapsed_time(end) / 1e3)  # elapsed_time is in ms
        del a, b, out
        torch.cuda.empty_cache()
    finally:
        if before is not None:
            torch.set_float32_matmul_precision(before)
    return 2 * n**3 / best / 1e12


def cuda_sync() -> None:
    """Wait for the GPU's queued work, so that a host clock read after it counts that work."""
    import torch

    torch.cuda.synchronize()


def gpu_memory_gb() -> float:
    """Peak memory torch's allocator handed out on the GPU since the last reset, in GB (1e9 bytes)."""
    import torch

    return torch.cuda.max_memory_allocated() / 1e9


def matmul_params(model_dir: Path, params: int) -> tuple[int, int]:
    """``(body, head)``: the parameters every token multiplies by (all but the token embedding
    and the LM head) and the LM head's (vocab x hidden; the embedding itself is a lookup)."""
    cfg = json.loads((model_dir / "config.json").read_text())
    head = int(cfg["vocab_size"]) * int(cfg["hidden_size"])
    tied = bool(cfg.get("tie_word_embeddings", False))
    return params - head * (1 if tied else 2), head


def train_flops(body_params: int, head_params: int, tokens_run: float, trained_positions: float) -> float:
    """Forward+backward FLOPs of one step: 6 x body parameters x tokens the model runs, plus
    6 x head parameters x the positions the head is applied to (the learner applies it to
    trained positions only). Attention's own score/value products (4 x layers x hidden x
    context per token and pass) are left out: under 5% at these sequence lengths."""
    return 6.0 * body_params * tokens_run + 6.0 * head_params * trained_positions


class PhaseTimer:
    """Times our learner's phases by wrapping its methods on the instance (no trainer change).

    ``logprobs_s``: the old policy's and the reference's log-probabilities (`Learner.fixed_logps`);
    ``fwd_bwd_s``: forward, loss and backward of every micro-batch (`Learner._micro_batch`);
    ``optimizer_s``: the rest of each pass (gradient clip, optimizer and scheduler step, zero_grad).
    It also counts the tokens the model runs in forward+backward (a group's shared prompt once
    when the learner shares prompts) and the trained positions (the LM head's rows).
    ``sync`` (on a GPU: `cuda_sync`) runs before every clock read: kernels are queued, not run,
    when a Python call returns, so without it a phase would be charged for the queue, not the work.
    """

    def __init__(self, learner: Any, sync: Callable[[], None] | None = None) -> None:
        self.learner = learner
        self.reset()
        fixed, one_pass, micro = learner.fixed_logps, learner.one_pass, learner._micro_batch
        wait = sync or (lambda: None)

        def timed_fixed(*a: Any, **k: Any) -> Any:
            wait()
            t = time.perf_counter()
            try:
                return fixed(*a, **k)
            finally:
                wait()
                self.t["logprobs_s"] += time.perf_counter() - t

        def timed_pass(*a: Any, **k: Any) -> Any:
            wait()
            t, inner = time.perf_counter(), self.t["fwd_bwd_s"]
            try:
                return one_pass(*a, **k)
            finally:
                wait()
                self.t["optimizer_s"] += time.perf_counter() - t - (self.t["fwd_bwd_s"] - inner)

        def timed_micro(plan: Any, part: Any, *a: Any, **k: Any) -> Any:
            self._count(plan.batch, part)
            wait()
            t, c, pc = time.perf_counter(), time.thread_time(), time.process_time()
            try:
                return micro(plan, part, *a, **k)
            finally:
                wait()
                self.t["fwd_bwd_s"] += time.perf_counter() - t
                self.t["fwd_bwd_cpu_s"] += time.thread_time() - c
                self.t["fwd_bwd_process_cpu_s"] += time.process_time() - pc

        learner.fixed_logps, learner.one_pass, learner._micro_batch = timed_fixed, timed_pass, timed_micro

    def reset(self) -> None:
        self.t = {"logprobs_s": 0.0, "fwd_bwd_s": 0.0, "fwd_bwd_cpu_s": 0.0, "fwd_bwd_process_cpu_s": 0.0,
                  "optimizer_s": 0.0, "tokens_run": 0, "padded_tokens_run": 0, "trained_positions": 0}

    def _count(self, batch: Any, part: Any) -> None:
        # A row's last token predicts nothing and the learner does not run the last column, so
        # each row counts one token less (for a row shorter than its pass this undercounts by one:
        # the figure never credits the learner with FLOPs it did not do).
        lens = batch.attention_mask.index_select(0, part).sum(1) - 1
        tokens, padded = int(lens.sum()), len(part) * int(lens.max())
        if batch.prompt_lens is not None and batch.prompt_ids is not None and self.learner.policy.share_prompts():
            plens, pids = batch.prompt_lens.index_select(0, part), batch.prompt_ids.index_select(0, part)
            unique = {int(i): int(p) for i, p in zip(pids.tolist(), plens.tolist(), strict=True)}
            if len(unique) < len(part) and min(unique.values()) >= 1:
                tokens = int((lens - plens).sum()) + sum(unique.values())
                padded = len(part) * int((lens - plens).max()) + len(unique) * max(unique.values())
        self.t["tokens_run"] += tokens
        self.t["padded_tokens_run"] += padded
        self.t["trained_positions"] += int(batch.loss_mask.index_select(0, part).sum())

    def snapshot(self) -> dict[str, float]:
        return dict(self.t)


def learner_figures(ours: dict[str, Any], body_params: int, head_params: int, peak: float,
                    peak_kind: str = "", on_gpu: bool = False) -> dict[str, Any]:
    """The learner's FLOP rate against the machine's peak, and our step's phases (medians, seconds).

    ``learner_tflops`` divides the forward+backward FLOPs by the whole learner phase (reference/old
    logprobs + forward+backward + optimizer); ``fwd_bwd_tflops`` by the forward+backward time only.
    On a GPU the host thread's CPU time says nothing about the device's work: no ``fwd_bwd_cpu_mfu``.
    """
    tokens, positions = ours.get("tokens_run"), ours.get("trained_positions")
    learner_s = sum(ours.get(k) or 0.0 for k in ("logprobs_s", "fwd_bwd_s", "optimizer_s"))
    flops = train_flops(body_params, head_params, tokens, positions) if tokens is not None else None
    tflops = flops / learner_s / 1e12 if flops and learner_s else None
    fb = ours.get("fwd_bwd_s")
    fb_tflops = flops / fb / 1e12 if flops and fb else None
    fb_cpu = None if on_gpu else ours.get("fwd_bwd_cpu_s")
    fb_cpu_tflops = flops / fb_cpu / 1e12 if flops and fb_cpu else None
    return {
        "peak_tflops": peak,
        "peak_kind": peak_kind,
        "learner_tflops": tflops,
        "learner_mfu": tflops / peak if tflops else None,
        "fwd_bwd_tflops": fb_tflops,
        "fwd_bwd_mfu": fb_tflops / peak if fb_tflops else None,
        "fwd_bwd_cpu_mfu": fb_cpu_tflops / peak if fb_cpu_tflops else None,
        "flops_per_step": flops,
        "flops_formula": "6 x body params x tokens run (shared prompts once) + 6 x head params x trained positions; "
                         "attention products excluded",
        "body_params": body_params,
        "head_params": head_params,
        "tokens_run_per_step": tokens,
        "padded_tokens_run_per_step": ours.get("padded_tokens_run"),
        "trained_positions_per_step": positions,
        "ours_phases_s": {
            "generation": ours.get("generation_s"),
            "build_batch": ours.get("build_batch_s"),
            "logprobs": ours.get("logprobs_s"),
            "fwd_bwd": fb,
            "optimizer": ours.get("optimizer_s"),
            "learner_other": ours.get("learner_other_s"),
        },
    }


def learner_line(ours: dict[str, Any], fig: dict[str, Any], on_gpu: bool = False) -> str:
    ph = fig["ours_phases_s"]
    parts = ", ".join(f"{k} {_fmt(v)}" for k, v in ph.items())
    mfu = fig["learner_mfu"]
    if on_gpu:
        return (f"ours phases (median s): {parts}; learner {_fmt(fig['learner_tflops'])} TFLOP/s of "
                f"{fig['peak_tflops']:.1f} peak ({fig['peak_kind']}): MFU {_fmt(mfu)} "
                f"(forward+backward alone {_fmt(fig['fwd_bwd_mfu'])})")
    return (f"ours phases (median s): {parts}; learner {_fmt(fig['learner_tflops'] and fig['learner_tflops'] * 1e3)} "
            f"GFLOP/s of {fig['peak_tflops'] * 1e3:.1f} peak: MFU {_fmt(mfu)} "
            f"(forward+backward alone {_fmt(fig['fwd_bwd_mfu'])}, on its thread's CPU time "
            f"{_fmt(fig['fwd_bwd_cpu_mfu'])})")


def _measured(rounds: list[dict[str, Any]], key: str, warm: int) -> list[Any]:
    """Every round's ``key`` list after its first ``warm`` steps, one after another."""
    return [x for r in rounds for x in r.get(key, [])[warm:]]


def summarize_ours(rounds: list[dict[str, Any]], warm: int) -> dict[str, Any]:
    """Medians over every round's measured steps (each round's first ``warm`` dropped)."""
    phases, step_s, cpu_s = (_measured(rounds, k, warm) for k in ("phases", "step_s", "step_cpu_s"))

    def med(key: str) -> float | None:
        return statistics.median(p[key] for p in phases) if phases else None

    return {
        **{k: med(k) for k in ("build_batch_s", "logprobs_s", "fwd_bwd_s", "fwd_bwd_cpu_s", "optimizer_s",
                               "learner_other_s", "padded_tokens_run", "tokens_run", "trained_positions",
                               "generation_s", "train_s")},
        **{k: _measured(rounds, k, 0) for k in ("phases", "step_s", "step_cpu_s")},
        "s_per_step": statistics.median(step_s) if step_s else None,
        "cpu_s_per_step": statistics.median(cpu_s) if cpu_s else None,
        "mean_completion_length": statistics.fmean(p["completion_length"] for p in phases) if phases else None,
        "torch_version": rounds[0]["torch_version"],
        "peak_gpu_memory_gb": _max_of(rounds, "peak_gpu_memory_gb"),
    }


def _max_of(rounds: list[dict[str, Any]], key: str) -> float | None:
    """The largest ``key`` over the rounds that report it (peak memory: the worst round counts)."""
    values = [r[key] for r in rounds if r.get(key) is not None]
    return max(values) if values else None


def summarize_trl(rounds: list[dict[str, Any]], warm: int) -> dict[str, Any]:
    """TRL's rounds pooled like ours (`summarize_ours`); the first failed round's error if any failed."""
    failed = [r for r in rounds if r.get("error")]
    if failed:
        return failed[0]
    step_s, cpu_s, gen_s, lengths = (_measured(rounds, k, warm)
                                     for k in ("step_s", "step_cpu_s", "step_generation_s", "step_lengths"))
    return {
        **{k: rounds[0].get(k) for k in ("trl_version", "transformers_version", "torch_version")},
        **{k: _measured(rounds, k, 0) for k in ("step_s", "step_cpu_s")},
        "s_per_step": statistics.median(step_s) if step_s else None,
        "cpu_s_per_step": statistics.median(cpu_s) if cpu_s else None,
        "generation_s": statistics.median(gen_s) if gen_s else None,
        "mean_completion_length": statistics.fmean(lengths) if lengths
        else statistics.fmean(r["mean_completion_length"] for r in rounds),
        "peak_gpu_memory_gb": _max_of(rounds, "peak_gpu_memory_gb"),
    }


def _round_figures(ours: dict[str, Any], trl: dict[str, Any], warm: int) -> dict[str, float | None]:
    """One round's medians and ratio, to show how far the rounds agree."""
    o = statistics.median(ours["step_s"][warm:])
    t = statistics.median(trl["step_s"][warm:]) if trl.get("step_s") else None
    return {"ours_s_per_step": o, "trl_s_per_step": t, "ratio": o / t if t else None}


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def machine_peak(on_gpu: bool, mixed_precision: str, threads: int, gpu_name: str | None) -> tuple[float, str]:
    """The dense matmul peak MFU is taken against (TFLOP/s, measured now) and how it was measured."""
    if on_gpu:
        kind = "bf16" if mixed_precision == "bf16" else "float32"
        peak_kind = f"cuda {kind}{' (TF32 off)' if kind == 'float32' else ''} {GPU_PEAK_N}^3 torch.mm"
        peak = gpu_peak_tflops(kind)
        print(f"GPU peak: {peak:.1f} TFLOP/s ({peak_kind}, {gpu_name})", flush=True)
        return peak, peak_kind
    peak = peak_tflops(threads)
    print(f"machine peak: {peak * 1e3:.1f} GFLOP/s (float32 2048^3 matmul, {threads} torch threads)", flush=True)
    return peak, f"cpu float32 2048^3 matmul, {threads} torch threads"


def step_line(ours: dict[str, Any], trl: dict[str, Any], ratio: float | None, cpu_ratio: float | None,
              verdict: str, rounds: list[dict[str, Any]], target: float) -> str:
    """The human summary: both sides' seconds a step, their ratio and the verdict (or TRL's error)."""
    ours_s, trl_s = ours.get("s_per_step"), trl.get("s_per_step")
    ours_cpu, trl_cpu = ours.get("cpu_s_per_step"), trl.get("cpu_s_per_step")
    return (
        f"ours {ours_s:.3f} s/step (CPU {ours_cpu:.3f} s; generation {ours['generation_s']:.3f} s, "
        f"train {ours['train_s']:.3f} s), "
        + (f"TRL {trl_s:.3f} s/step (CPU {trl_cpu:.3f} s; generation {_fmt(trl.get('generation_s'))} s); "
           f"ratio ours/TRL {ratio:.3f} "
           f"(CPU {cpu_ratio:.3f}), target <= {target}: {verdict}"
           + (f"; per round {', '.join(_fmt(r['ratio']) for r in rounds)}" if len(rounds) > 1 else "")
           if ratio is not None and cpu_ratio is not None else f"TRL: {trl.get('error')}")
    )


def model_line(work: dict[str, Any], params: int) -> str:
    """The workload in one line: the model's shape, the batch, the tokens and the threads."""
    m = work["model"]
    shape = (f"llama h{m['hidden_size']} i{m['intermediate_size']} L{m['num_hidden_layers']} "
             f"heads {m['num_attention_heads']}/{m['num_key_value_heads']} ({params / 1e6:.2f}M params)")
    return (f"model: {shape}; {work['prompts_per_step']} prompts x G={work['num_generations']}, "
            f"{work['max_tokens']} completion tokens, {work['threads']} torch threads")
