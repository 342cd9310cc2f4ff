"""The engine's decoding step on a real CUDA GPU: the plain step against transformers' forward, the
graph-replayed step against the eager one, and weight updates reaching a captured graph.

GPU-only (skipped without one). On CPUs `tests/inference/test_fast_decode.py` covers the plain step
and `test_engine_fake_cuda.py` its device placement; what needs the real device is here.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

PROMPTS = [[5, 6, 7, 8], [9, 10, 11], [12, 13, 14, 15, 16, 17], [18, 19]]


def _model(dtype: torch.dtype = torch.float32) -> tuple[Any, Any]:
    from verifiers.models.tiny import TinyModelSpec, build_tiny_model

    torch.manual_seed(0)
    model, tok = build_tiny_model(TinyModelSpec(hidden_size=128, intermediate_size=384, num_hidden_layers=3,
                                                num_attention_heads=4, num_key_value_heads=2))
    return model.to("cuda:0", dtype=dtype).eval(), tok


def _run(engine: Any, params: Any, n: int = 3) -> list[Any]:
    """Every prompt at once (one running batch, rows of several lengths finishing apart)."""

    async def go() -> list[Any]:
        return await asyncio.gather(*[engine.generate(p, params, n=n) for p in PROMPTS])

    return [o for r in asyncio.run(go()) for o in r.outputs]


def _greedy(max_tokens: int = 24) -> Any:
    from verifiers.inference.engine.sampling import SamplingParams

    return SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, logprobs=True)


def _assert_same(a: list[Any], b: list[Any], tol: float) -> None:
    assert [o.token_ids for o in a] == [o.token_ids for o in b]
    for x, y in zip(a, b, strict=True):
        assert x.logprobs == pytest.approx(y.logprobs, abs=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_plain_step_matches_transformers_forward_on_cuda(dtype: torch.dtype) -> None:
    from verifiers.inference.engine import InferenceEngine

    model, tok = _model(dtype)
    with InferenceEngine(model, tok, cuda_graphs=False) as plain:
        assert plain.decode_path.startswith("the engine's own decoding step")
        ours = _run(plain, _greedy(12))
    with InferenceEngine(model, tok, fast_decode=False) as hf:
        theirs = _run(hf, _greedy(12))
    if dtype == torch.float32:
        _assert_same(ours, theirs, 1e-4)
    else:  # bf16 rounding may flip a near-tie: compare the first tokens' log-probabilities only
        assert [o.token_ids[0] for o in ours] == [o.token_ids[0] for o in theirs]
        assert [o.logprobs[0] for o in ours] == pytest.approx([o.logprobs[0] for o in theirs], abs=5e-2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_graph_replay_equals_the_eager_step(dtype: torch.dtype) -> None:
    from verifiers.inference.engine import InferenceEngine
    from verifiers.inference.engine.sampling import SamplingParams

    model, tok = _model(dtype)
    sampled = SamplingParams(temperature=1.0, top_p=0.9, top_k=20, seed=3, max_tokens=16, logprobs=True)
    with InferenceEngine(model, tok, cuda_graphs=False) as eager:
        want, want_sampled = _run(eager, _greedy()), _run(eager, sampled)
    with InferenceEngine(model, tok) as graphed:
        assert graphed.decode_path == "the engine's own decoding step, replayed from CUDA graphs"
        got, got_sampled = _run(graphed, _greedy()), _run(graphed, sampled)
        stats = graphed._decoder.graphed.stats
    _assert_same(got, want, 1e-5 if dtype == torch.float32 else 1e-2)
    assert [o.token_ids for o in got_sampled] == [o.token_ids for o in want_sampled]  # per-row seeds hold
    assert stats["captures"] >= 1 and stats["replays"] > 20


def test_weight_updates_in_place_reach_the_captured_graph() -> None:
    """The trainer's optimizer and the weight sync write parameters in place; a graph captured
    before must decode with the new weights (checked against an eager engine on the same model),
    without a recapture. A replaced parameter (a new tensor) forces a recapture."""
    from verifiers.inference.engine import InferenceEngine

    model, tok = _model()
    with InferenceEngine(model, tok) as graphed, InferenceEngine(model, tok, cuda_graphs=False) as eager:
        before = _run(graphed, _greedy())
        stats = graphed._decoder.graphed.stats
        captures = stats["captures"]
        with graphed.paused(), eager.paused(), torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p), alpha=0.5)  # in place: the same storage
        graphed.bump_version()
        after, want = _run(graphed, _greedy()), _run(eager, _greedy())
        assert stats["captures"] == captures, "an update in place must not need a new graph"
        assert [o.token_ids for o in after] != [o.token_ids for o in before]
        _assert_same(after, want, 1e-5)
        with graphed.paused(), eager.paused(), torch.no_grad():
            head = model.lm_head
            head.weight = torch.nn.Parameter(head.weight.detach() * 2.0)  # a new tensor (unties the head)
        graphed.bump_version()
        replaced, want = _run(graphed, _greedy()), _run(eager, _greedy())
        assert stats["captures"] > captures
        _assert_same(replaced, want, 1e-5)


def test_update_weights_reaches_the_captured_graph() -> None:
    from verifiers.inference.engine import InferenceEngine

    model, tok = _model()
    other, _ = _model()
    with torch.no_grad():
        for p in other.parameters():
            p.mul_(1.5)
    with InferenceEngine(model, tok) as graphed:
        _run(graphed, _greedy())
        graphed.update_weights(other.state_dict())
        got = _run(graphed, _greedy())
    with InferenceEngine(other, tok, cuda_graphs=False) as eager:
        want = _run(eager, _greedy())
    _assert_same(got, want, 1e-5)


def test_bf16_autocast_sampling_replays_from_graphs_like_the_eager_step() -> None:
    """A trainer with ``mixed_precision = "bf16"`` has its engine sample under bf16 autocast; the
    captured step (autocast without a cast cache) gives the eager step's tokens."""
    from verifiers.inference.engine import InferenceEngine

    model, tok = _model()
    with InferenceEngine(model, tok, autocast="bfloat16", cuda_graphs=False) as eager:
        want = _run(eager, _greedy())
    with InferenceEngine(model, tok, autocast="bfloat16") as graphed:
        got = _run(graphed, _greedy())
        assert graphed._decoder.graphed.stats["replays"] > 0
    _assert_same(got, want, 1e-2)
