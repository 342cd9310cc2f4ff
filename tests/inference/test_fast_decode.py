"""The engine's own decoding step (`verifiers.inference.engine.fast_decode`) gives transformers' results.

Each model is served three times (the fast path with packed weights and without, and transformers'
forward: ``fast_decode`` off) on the same continuous-batching workload: prompts of different
lengths (left padding), requests of different lengths (rows leave and their slots are refilled)
and a request that arrives while others decode (rows join). Greedy tokens must be identical and
log-probabilities equal to float32 rounding. Models the fast path
does not reproduce must be refused, so the engine keeps their own forward.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from verifiers.inference.engine import InferenceEngine  # noqa: E402
from verifiers.inference.engine.fast_decode import FastDecoder, why_not  # noqa: E402
from verifiers.inference.engine.sampling import SamplingParams  # noqa: E402
from verifiers.models.tiny import TinyModelSpec, build_char_tokenizer, build_tiny_model  # noqa: E402


def _qwen3(tok: Any) -> Any:
    """Qwen3: per-head q/k RMSNorm before the rotation, and an explicit head_dim."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=len(tok), hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=24, max_position_embeddings=512,
                      pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, tie_word_embeddings=False)
    return Qwen3ForCausalLM(cfg).eval()


def _model(arch: str) -> tuple[Any, Any]:
    if arch == "qwen3":
        tok = build_char_tokenizer()
        return _qwen3(tok), tok
    spec = TinyModelSpec(arch=arch, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2)
    return build_tiny_model(spec)


async def _workload(engine: InferenceEngine, tok: Any) -> list[tuple[list[int], list[float]]]:
    texts = ["a", "hello there", "the quick brown fox", "xy", "a somewhat longer prompt than the rest", "q"]
    greedy = [SamplingParams(temperature=0, max_tokens=6 + 5 * i, ignore_eos=True, logprobs=True) for i in range(6)]
    first = [engine.generate(tok.encode(t), p) for t, p in zip(texts, greedy, strict=True)]
    running = asyncio.gather(*first)
    await asyncio.sleep(0.02)  # joins a batch that is already decoding (different cache columns per row)
    late = await engine.generate(tok.encode("late arrival"), SamplingParams(temperature=0, max_tokens=9,
                                                                             ignore_eos=True, logprobs=True))
    outs = [*await running, late]
    return [(list(o.outputs[0].token_ids), list(o.outputs[0].logprobs)) for o in outs]


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_fast_decode_gives_transformers_tokens_and_logprobs(arch: str) -> None:
    model, tok = _model(arch)
    assert why_not(model) is None
    results = {}
    paths = {"packed": {"packed_weights": True}, "plain": {"packed_weights": False},
             "transformers": {"fast_decode": False}}
    for path, kw in paths.items():
        with InferenceEngine(model, tok, **kw) as engine:
            assert (engine._decoder.fast is not None) is (path != "transformers")
            assert path != "packed" or engine._decoder.fast.pack_reason is None
            results[path] = asyncio.run(_workload(engine, tok))
            assert engine.stats["max_batch"] > 1
    for path in ("packed", "plain"):
        for (fast_ids, fast_lp), (hf_ids, hf_lp) in zip(results[path], results["transformers"], strict=True):
            assert fast_ids == hf_ids
            assert fast_lp == pytest.approx(hf_lp, abs=2e-5)
    assert len({tuple(ids) for ids, _ in results["packed"]}) > 3  # the prompts lead to different outputs


def test_fast_decode_sees_weight_updates_at_once() -> None:
    model, tok = _model("llama")
    other, _ = build_tiny_model(TinyModelSpec(hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                                              num_attention_heads=4, num_key_value_heads=2, seed=7))
    greedy = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True, logprobs=True)
    prompt = tok.encode("weights")

    def run(engine: InferenceEngine) -> tuple[list[int], list[float]]:
        out = engine.generate_sync(prompt, greedy).outputs[0]
        return list(out.token_ids), list(out.logprobs)

    with InferenceEngine(other, tok, fast_decode=False) as reference:
        expected = run(reference)
    with InferenceEngine(model, tok, packed_weights=True) as engine:  # packed: the copy must not go stale
        before = run(engine)
        engine.update_weights(other.state_dict())
        after = run(engine)
    assert after[0] == expected[0] and after[1] == pytest.approx(expected[1], abs=2e-5)
    assert before[1] != pytest.approx(expected[1], abs=1e-3)


class _LoraLikeLinear(torch.nn.Linear):
    """A subclass of nn.Linear with its own forward, as LoRA and quantized layers are."""

    def forward(self, x: Any) -> Any:
        return super().forward(x) * 2.0


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda m: m.to(torch.bfloat16), "float32 only"),
        (lambda m: setattr(m.model.layers[1].self_attn, "q_proj", _LoraLikeLinear(64, 64, bias=False)), "plain nn.Linear"),
        (lambda m: m.model.layers[0].mlp.register_forward_hook(lambda *a: None), "forward hooks"),
        (lambda m: m.model.layers[1].self_attn.register_forward_pre_hook(lambda *a: None), "forward hooks"),
        (lambda m: setattr(m.model.layers[0].self_attn, "sliding_window", 16), "sliding-window"),
        (lambda m: setattr(m.config, "hidden_act", "gelu"), "hidden_act"),
    ],
    ids=["bfloat16", "lora-like-projection", "hooked-mlp", "pre-hooked-attention", "sliding-window", "gelu"],
)
def test_models_the_fast_path_would_not_reproduce_keep_their_own_forward(change: Any, reason: str) -> None:
    model, tok = _model("llama")
    change(model)
    assert reason in (why_not(model) or "")
    assert FastDecoder.for_model(model) is None
    with InferenceEngine(model, tok) as engine:
        assert engine._decoder.fast is None
        out = engine.generate_sync(tok.encode("still served"), SamplingParams(temperature=0, max_tokens=4,
                                                                               ignore_eos=True))
    assert len(out.outputs[0].token_ids) == 4


def test_other_architectures_are_refused() -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_embd=32, n_layer=1, n_head=2))
    assert "GPT2LMHeadModel is not one of" in (why_not(model) or "")


def _lora(model: Any, **extra: Any) -> Any:
    """``model`` under peft LoRA adapters on every projection, B made non-zero (a trained adapter)."""
    peft = pytest.importorskip("peft")
    config = peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=[
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"], **extra)
    lora = peft.get_peft_model(model, config)
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in lora.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.2)
    return lora.eval()


def _greedy(engine: InferenceEngine, tok: Any) -> list[tuple[list[int], list[float]]]:
    return asyncio.run(_workload(engine, tok))


def _same(got: list[tuple[list[int], list[float]]], want: list[tuple[list[int], list[float]]]) -> None:
    for (ids, lps), (want_ids, want_lps) in zip(got, want, strict=True):
        assert ids == want_ids
        assert lps == pytest.approx(want_lps, abs=2e-5)


def test_a_lora_model_decodes_on_the_fast_path_with_peft_s_results() -> None:
    """A LoRA run's policy (a peft model) samples what peft's own forward gives, adapters trained in
    place between requests included, and with the adapters switched off, the base model's."""
    model, tok = _model("llama")
    lora = _lora(model)
    assert why_not(lora) is None
    with InferenceEngine(lora, tok, fast_decode=False) as reference:
        want = _greedy(reference, tok)
    for kw in ({"packed_weights": True}, {"packed_weights": False}):
        with InferenceEngine(lora, tok, **kw) as engine:
            fast = engine._decoder.fast
            assert fast is not None and fast.lora and fast.model is model
            _same(_greedy(engine, tok), want)
    with InferenceEngine(lora, tok, packed_weights=True) as engine:
        with torch.no_grad():  # a training step writes the adapters in place; the engine sees it at once
            for name, p in lora.named_parameters():
                if "lora_A" in name:
                    p.mul_(-1.5)
        moved = _greedy(engine, tok)
        with lora.disable_adapter():
            engine.bump_version()
            base = _greedy(engine, tok)
    with InferenceEngine(lora, tok, fast_decode=False) as reference:
        _same(moved, _greedy(reference, tok))
    assert [ids for ids, _ in moved] != [ids for ids, _ in want]
    with InferenceEngine(model, tok, fast_decode=False) as reference, lora.disable_adapter():
        _same(base, _greedy(reference, tok))


def test_lora_variants_keep_peft_s_forward() -> None:
    model, tok = _model("llama")
    dora = _lora(model, use_dora=True)
    assert "plain nn.Linear" in (why_not(dora) or "")
    with InferenceEngine(dora, tok) as engine:
        assert engine._decoder.fast is None
