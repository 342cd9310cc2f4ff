"""Packed projection weights (`verifiers.inference.engine.projections`): same products, never stale.

The engine's fast path multiplies by oneDNN-packed copies of the projection weights (where
measured faster, or when asked: these tests ask). A copy is
only worth having if it gives the modules' own products and is rebuilt whenever the weights
change in a way a user or the trainer changes them: under `paused` (the trainer's fused AdamW,
which autograd's version counter does not see), an in-place edit, a replaced parameter.
"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from verifiers.inference.engine import InferenceEngine, fast_decode, projections  # noqa: E402
from verifiers.inference.engine.product_choice import ProductChoice  # noqa: E402
from verifiers.inference.engine.projections import ModuleProjections, PackedProjections  # noqa: E402
from verifiers.inference.engine.sampling import SamplingParams  # noqa: E402
from verifiers.models.tiny import TinyModelSpec, build_tiny_model  # noqa: E402

SHAPE = {"hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2}
GREEDY = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True, logprobs=True)


def _model(arch: str = "llama", seed: int = 0) -> tuple[Any, Any]:
    return build_tiny_model(TinyModelSpec(arch=arch, seed=seed, **SHAPE))


def _greedy(model: Any, tok: Any, **engine_kw: Any) -> tuple[list[int], list[float]]:
    with InferenceEngine(model, tok, **engine_kw) as engine:
        out = engine.generate_sync(tok.encode("packed weights"), GREEDY).outputs[0]
    return list(out.token_ids), list(out.logprobs)


def _served(engine: InferenceEngine, tok: Any) -> tuple[list[int], list[float]]:
    out = engine.generate_sync(tok.encode("packed weights"), GREEDY).outputs[0]
    return list(out.token_ids), list(out.logprobs)


def _assert_same(got: tuple[list[int], list[float]], want: tuple[list[int], list[float]]) -> None:
    assert got[0] == want[0]
    assert got[1] == pytest.approx(want[1], abs=2e-5)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])  # qwen2: biases on the fused query/key/value
@pytest.mark.parametrize("shape", [(5, 64), (3, 7, 64)], ids=["decode-rows", "prefill-chunk"])
def test_packed_products_are_the_modules_products(arch: str, shape: tuple[int, ...]) -> None:
    model, _ = _model(arch)
    if arch == "qwen2":
        assert model.model.layers[0].self_attn.q_proj.bias is not None
    plain = ModuleProjections(model)
    with torch.inference_mode():
        packed = PackedProjections(model)
        x = torch.randn(*shape)
        for i in range(len(model.model.layers)):
            for got, want in zip(packed.qkv(i, x), plain.qkv(i, x), strict=True):
                torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(packed.o(i, x), plain.o(i, x), atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(packed.mlp(i, x), plain.mlp(i, x), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(packed.head(x), plain.head(x), atol=1e-5, rtol=1e-5)


def test_the_engine_decodes_with_packed_weights_when_asked_and_never_when_off() -> None:
    model, tok = _model()
    with InferenceEngine(model, tok, packed_weights=True) as engine:
        assert engine._decoder.fast.pack_reason is None
        engine.generate_sync(tok.encode("x"), GREEDY)
        assert isinstance(engine._decoder.fast.projections(), PackedProjections)
    with InferenceEngine(model, tok, packed_weights=False) as engine:
        assert engine._decoder.fast.pack_reason == "packed weights are off"
        assert isinstance(engine._decoder.fast.projections(), ModuleProjections)


@pytest.mark.parametrize("faster", [True, False])
def test_by_default_the_engine_packs_where_packing_is_measured_faster(monkeypatch: pytest.MonkeyPatch,
                                                                      faster: bool) -> None:
    model, tok = _model()
    verdict = ProductChoice(packed=faster, packed_ms=1.0 if faster else 2.0, plain_ms=1.5, use="inference", rows=64)
    asked = []
    monkeypatch.setattr(fast_decode, "choose", lambda lm, use: asked.append(use) or verdict)
    with InferenceEngine(model, tok) as engine:
        assert asked == ["inference"]
        assert engine._decoder.fast.pack_reason == verdict.reason()
        got = _served(engine, tok)
        assert isinstance(engine._decoder.fast.projections(), PackedProjections if faster else ModuleProjections)
    assert faster or "F.linear is as fast here" in engine._decoder.fast.pack_reason
    _assert_same(got, _greedy(model, tok, packed_weights=True))  # either way, the same tokens


def test_an_optimizer_step_under_pause_reaches_the_engine() -> None:
    """The trainer's update: fused AdamW (which leaves autograd's version counters alone) under `paused`."""
    model, tok = _model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05, fused=True)
    with InferenceEngine(model, tok, packed_weights=True) as engine:
        before = _served(engine, tok)
        with engine.paused():
            loss = model(torch.tensor([tok.encode("packed weights")])).logits.logsumexp(-1).mean()
            loss.backward()
            optimizer.step()
        assert all(p.grad is not None for p in model.parameters())
        after = _served(engine, tok)
    want = _greedy(model, tok, packed_weights=False)
    _assert_same(after, want)
    assert before[1] != pytest.approx(want[1], abs=1e-3)  # the step did change the outputs


@pytest.mark.parametrize("edit", ["in-place", "replaced", "data-then-bump"])
def test_edits_outside_a_pause_reach_the_engine(edit: str) -> None:
    model, tok = _model()
    other, _ = _model(seed=7)
    with InferenceEngine(model, tok, packed_weights=True) as engine:
        before = _served(engine, tok)
        pairs = list(zip(model.parameters(), other.parameters(), strict=True))
        if edit == "in-place":  # recorded by autograd's version counter
            with torch.no_grad():
                for p, q in pairs:
                    p.copy_(q)
        elif edit == "replaced":  # new storage for every projection weight
            for name, module in model.model.layers.named_modules():
                if isinstance(module, torch.nn.Linear):
                    new = other.model.layers.get_submodule(name).weight
                    module.weight = torch.nn.Parameter(new.detach().clone())
        else:  # a write nothing records: bump_version is how a user says the weights changed
            for p, q in pairs:
                p.data.copy_(q.data)
            engine.bump_version()
        after = _served(engine, tok)
    want = _greedy(model, tok, packed_weights=False)  # the edited model, decoded from its own weights
    _assert_same(after, want)
    assert before[1] != pytest.approx(want[1], abs=1e-3)


def test_a_model_over_the_size_limit_decodes_from_its_own_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    model, tok = _model()
    monkeypatch.setattr(projections, "PACK_MAX_BYTES", 1000)
    reason = PackedProjections.unavailable(model)
    assert reason is not None and "packing copies them" in reason
    with InferenceEngine(model, tok, packed_weights=True) as engine:
        assert engine.fast_decoding and engine._decoder.fast.pack_reason == reason
        served = _served(engine, tok)
    monkeypatch.undo()
    _assert_same(served, _greedy(model, tok))


def test_the_engine_decodes_under_cpu_autocast_with_the_modules_products() -> None:
    """An engine driven from a thread under bf16 autocast (a user's own loop) still decodes: the
    packed float32 primitive refuses bf16 inputs, so autocast takes the modules' products."""
    from verifiers.inference.engine import InferenceEngine
    from verifiers.inference.engine.sampling import SamplingParams
    from verifiers.models.tiny import TinyModelSpec, build_tiny_model

    torch.manual_seed(0)
    model, tok = build_tiny_model(TinyModelSpec(hidden_size=64))
    params = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    engine = InferenceEngine(model, tok, packed_weights=True)
    run = engine._run
    engine._run = lambda: _autocast(run)  # the engine's thread runs under autocast
    with engine:
        out = engine.generate_sync([5, 6, 7], params)
    assert len(out.outputs[0].token_ids) == 6


def _autocast(fn: Any) -> Any:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return fn()


def test_the_engine_samples_under_bf16_autocast_when_asked() -> None:
    """``autocast="bfloat16"`` (a bf16-autocast trainer on a GPU): the engine's forwards run under
    autocast, so its logprobs are bf16 ones (close to, not equal to, float32's); anything else is
    refused by name."""
    from verifiers.errors import ConfigError
    from verifiers.models.tiny import TinyModelSpec, build_tiny_model

    torch.manual_seed(0)
    model, tok = build_tiny_model(TinyModelSpec(hidden_size=64))
    params = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True, logprobs=True)
    with InferenceEngine(model, tok) as f32, InferenceEngine(model, tok, autocast="bfloat16") as bf16:
        a, b = f32.generate_sync([5, 6, 7], params), bf16.generate_sync([5, 6, 7], params)
    first_a, first_b = a.outputs[0].logprobs[0], b.outputs[0].logprobs[0]
    assert first_a != first_b and abs(first_a - first_b) < 0.1
    with pytest.raises(ConfigError, match="autocast must be None or 'bfloat16'"):
        InferenceEngine(model, tok, autocast="float16")
