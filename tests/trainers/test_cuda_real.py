"""The same paths as test_fake_cuda.py, on a real CUDA GPU (skipped without one).

The fake-device tests prove placement on every CPU run; these run the real kernels where a
GPU is lent: a few training steps per configuration, the engine against its CPU twin, and
the learner's peak memory read from CUDA's own allocator statistics.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

CASES = {
    "kl-iterations": {"algorithm_overrides": {"beta": 0.04}, "num_iterations": 2, "gradient_accumulation_steps": 2},
    "lora-kl-ahead": {"lora": True, "algorithm_overrides": {"beta": 0.04}, "num_batches_ahead": 1},
    "checkpointing": {"gradient_checkpointing": True},
    "bf16-autocast": {"mixed_precision": "bf16"},
}


@pytest.mark.parametrize("case", list(CASES))
def test_training_steps_on_cuda(train_config: Callable[..., Any], run_training: Callable[..., Any],
                                tmp_path: Path, case: str) -> None:
    run = run_training(train_config(tmp_path, **CASES[case]))
    assert run.trainer.device.type == "cuda"
    assert next(run.trainer.model.parameters()).is_cuda
    assert len(run.rows) == 3 and all(math.isfinite(r["loss"]) and r["grad_norm"] > 0 for r in run.rows)


def test_engine_on_cuda_matches_the_cpu() -> None:
    from verifiers.inference.engine import InferenceEngine
    from verifiers.inference.engine.sampling import SamplingParams
    from verifiers.models.tiny import TinyModelSpec, build_tiny_model

    torch.manual_seed(0)
    model, tok = build_tiny_model(TinyModelSpec(hidden_size=64))
    params = SamplingParams(temperature=0.0, max_tokens=16, logprobs=True)
    with InferenceEngine(model, tok) as engine:
        cpu = engine.generate_sync([5, 6, 7, 8], params, n=2)
    model.to("cuda:0")
    with InferenceEngine(model, tok) as engine:
        gpu = engine.generate_sync([5, 6, 7, 8], params, n=2)
        seeded = engine.generate_sync([5, 6], SamplingParams(temperature=1.0, seed=7, max_tokens=8), n=2)
    assert [o.token_ids for o in gpu.outputs] == [o.token_ids for o in cpu.outputs]
    assert gpu.outputs[0].logprobs == pytest.approx(cpu.outputs[0].logprobs, abs=1e-3)
    assert all(len(o.token_ids) > 0 for o in seeded.outputs)


def test_learner_peak_memory_by_the_cuda_allocator() -> None:
    """The CPU accounting's claim checked against CUDA's own allocator: chunked logprobs at a 152k
    vocabulary need about one float32 chunk of logits above the model's activations."""
    import importlib.util

    from trainers.grpo.learn.logprobs import completion_logps
    from trainers.testing.memory import body_peak_bytes, learner_peak_bytes

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "memory.py"
    spec = importlib.util.spec_from_file_location("vf_bench_memory", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    vocab, chunk = 152_064, 256
    model = bench.build_model(vocab, 64).to("cuda:0")

    def allocator_peak(step: Callable[[], Any]) -> int:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        step()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base

    excess = []
    for rows in (4, 16):
        batch = bench.make_batch(rows, 128, vocab).to("cuda:0")
        body = allocator_peak(lambda b=batch: body_peak_bytes(model, b))
        new = allocator_peak(lambda b=batch: learner_peak_bytes(
            model, b, lambda m, x: completion_logps(m, x, chunk_tokens=chunk)[0]))
        excess.append((new - body) / (chunk * vocab * 4))
    # kernel workspaces and the allocator's rounding are not in the CPU figure: a looser bound
    assert max(excess) <= 2.0, excess


@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "bf16-autocast"])
def test_the_plain_learner_forward_runs_on_cuda_with_transformers_values(autocast: bool,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """On a GPU the learner runs the plain-op forward too (fewer kernels than transformers'
    generic one); its log-probabilities and gradients are transformers' (float32: to rounding;
    under bf16 autocast: within bf16's)."""
    import functools

    from trainers.grpo.learn import plain_forward
    from trainers.grpo.learn.logprobs import completion_logps

    from .test_logprobs_memory import assert_same, make_batch, step, tiny

    torch.manual_seed(0)
    model = tiny(arch="llama").to("cuda:0")
    assert plain_forward.why_not(model, model) is None
    batch = make_batch(model.config.vocab_size, groups=3, group_size=4, seed=5, completion=(1, 12)).to("cuda:0")
    calls = []
    real = plain_forward.forward
    monkeypatch.setattr(plain_forward, "forward", lambda *a, **k: calls.append(1) or real(*a, **k))
    logps = functools.partial(completion_logps, chunk_tokens=16)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
        mine = step(model, batch, logps, 0.8)
        assert calls, "the plain forward did not run on CUDA"
        monkeypatch.setattr(plain_forward, "why_not", lambda *_: "forced off by the test")
        theirs = step(model, batch, logps, 0.8)
    assert_same(theirs, mine, 3e-2 if autocast else 1e-4)
