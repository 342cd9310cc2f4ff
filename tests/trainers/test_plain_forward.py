"""The learner's plain-op forward (`trainers.grpo.learn.plain_forward`) is transformers' function.

`test_logprobs_memory.py` already holds the learner to the full-logits path (transformers'
forward) for Llama and Qwen2, which now run as plain ops on a CPU. Here: Qwen3 (per-head q/k
norm, an explicit head_dim), the same batch through both forwards of the learner itself, and
peft LoRA models, whose updates the plain forward adds itself, and the models it must leave to
transformers (wrapped, DoRA, an adapted head, gradient checkpointing, autocast, bf16), which still
get the right values.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
import torch
from torch import nn

from trainers.grpo.learn import plain_forward
from trainers.grpo.learn.logprobs import completion_logps, full_logits_logps

from .test_logprobs_memory import _one_thread, assert_same, make_batch, step, tiny  # noqa: F401 (autouse fixture)


def qwen3() -> Any:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=97, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=24, max_position_embeddings=512,
                      pad_token_id=0, eos_token_id=1, tie_word_embeddings=False)
    return Qwen3ForCausalLM(cfg).eval()


class Calls:
    """Counts the plain forward's passes (it runs instead of the model's modules)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.n = 0
        real = plain_forward.forward

        def counted(*a: Any, **k: Any) -> Any:
            self.n += 1
            return real(*a, **k)

        monkeypatch.setattr(plain_forward, "forward", counted)


def forced_transformers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plain_forward, "why_not", lambda *_: "forced off by the test")


def _measured(monkeypatch: pytest.MonkeyPatch, packed: bool) -> None:
    """The learner's products as where packing was measured faster (an AMD EPYC) or not (an Intel Xeon)."""
    from trainers.grpo.learn import packed_linear
    from verifiers.inference.engine.product_choice import ProductChoice

    verdict = ProductChoice(packed, 1.0 if packed else 2.0, 1.5, "trained", 512)
    monkeypatch.setattr(packed_linear, "choose", lambda lm, use: verdict)


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "F.linear"])
@pytest.mark.parametrize("shared", [True, False], ids=["shared-prompt", "plain"])
@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_plain_forward_gives_transformers_logps_and_gradients(arch: str, shared: bool, packed: bool,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    _measured(monkeypatch, packed)
    model = qwen3() if arch == "qwen3" else tiny(arch=arch)
    # prompts of different lengths (left padding in the prompt pass), completions of 1 to 11 tokens
    batch = make_batch(model.config.vocab_size, groups=3, group_size=4, shared=shared, seed=5, completion=(1, 12))
    calls = Calls(monkeypatch)
    mine = step(model, batch, functools.partial(completion_logps, chunk_tokens=16), 0.8)
    ran = calls.n
    assert ran >= 2 if shared else ran == 1  # the prompts once then the completions (buckets), or whole rows
    full = step(model, batch, full_logits_logps, 0.8)  # transformers' forward over whole rows
    assert_same(full, mine)
    with monkeypatch.context() as m:
        forced_transformers(m)
        theirs = step(model, batch, functools.partial(completion_logps, chunk_tokens=16), 0.8)
    assert calls.n == ran
    assert_same(theirs, mine)


class Wrapper(nn.Module):
    """What DDP looks like to the learner: the model under ``.module``, its own forward in between."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, *a: Any, **k: Any) -> Any:
        return self.module(*a, **k)


def _wrapped(model: Any) -> Any:
    return Wrapper(model)


def _dora(model: Any) -> Any:
    from peft import LoraConfig, get_peft_model

    return get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], use_dora=True))


def _lora_on_head(model: Any) -> Any:
    from peft import LoraConfig, get_peft_model

    return get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "lm_head"]))


def _checkpointing(model: Any) -> Any:
    model.gradient_checkpointing_enable()
    return model


def _bf16(model: Any) -> Any:
    return model.to(torch.bfloat16)


@pytest.mark.parametrize("change", [_wrapped, _dora, _lora_on_head, _checkpointing, _bf16],
                         ids=["ddp-like", "dora", "lora-on-head", "checkpointing", "bf16"])
def test_models_it_does_not_reproduce_keep_transformers_forward(change: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    model = change(tiny(arch="llama"))
    lm = plain_forward_lm(model)
    assert plain_forward.why_not(model, lm) is not None
    batch = make_batch(lm.config.vocab_size, groups=2, group_size=3, seed=2)
    calls = Calls(monkeypatch)
    logp, _ = completion_logps(model, batch, 1.0, chunk_tokens=16)
    assert calls.n == 0
    with torch.no_grad():
        ref, _ = full_logits_logps(model, batch, 1.0)
    tol = 2e-2 if change is _bf16 else 1e-5
    mask = batch.loss_mask
    torch.testing.assert_close(torch.where(mask, logp.detach(), 0.0).float(), torch.where(mask, ref, 0.0).float(),
                               atol=tol, rtol=tol)


def test_autocast_keeps_transformers_forward(monkeypatch: pytest.MonkeyPatch) -> None:
    model = tiny(arch="llama")
    assert plain_forward.why_not(model, model) is None
    calls = Calls(monkeypatch)
    batch = make_batch(model.config.vocab_size, groups=2, group_size=3, seed=2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert plain_forward.why_not(model, model) == "autocast"
        completion_logps(model, batch, 1.0, chunk_tokens=16)
    assert calls.n == 0


def plain_forward_lm(model: Any) -> Any:
    from trainers.grpo.learn.logprobs import _causal_lm

    return _causal_lm(model)


def smollm2_shaped() -> Any:
    """SmolLM2-135M-Instruct's layout in miniature: tied embeddings, 3 query heads per key/value head,
    no head_dim in the config, rope theta 1e5, a vocabulary far wider than the hidden size."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=640, hidden_size=96, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=3, num_key_value_heads=1, tie_word_embeddings=True, rope_theta=100000.0,
                      rms_norm_eps=1e-5, max_position_embeddings=512, pad_token_id=2, eos_token_id=2)
    return LlamaForCausalLM(cfg).eval()


def test_tied_embeddings_take_the_plain_forward_and_get_transformers_gradient(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real model's layout (tied head): the plain forward and the packed projections apply, and the
    shared embedding/head weight gets transformers' gradient (both its uses summed), like every other
    parameter; the log-probabilities are transformers' too."""
    from verifiers.inference.engine.fast_decode import why_not as decoder_why_not
    from verifiers.inference.engine.projections import PackedProjections

    model = smollm2_shaped()
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert plain_forward.why_not(model, model) is None and decoder_why_not(model) is None
    assert PackedProjections.unavailable(model) is None
    batch = make_batch(model.config.vocab_size, groups=2, group_size=4, seed=3, completion=(2, 9))
    calls = Calls(monkeypatch)
    mine = step(model, batch, functools.partial(completion_logps, chunk_tokens=7), 1.0)
    assert calls.n >= 2  # the prompts once, then the completions: the plain forward ran
    full = step(model, batch, full_logits_logps, 1.0)  # transformers' forward, full logits
    assert_same(full, mine, tol=2e-5)
    assert "model.embed_tokens.weight" in mine[2] and "lm_head.weight" not in mine[2]  # one tied parameter
    assert mine[2]["model.embed_tokens.weight"].abs().sum() > 0


def _lora_everywhere(model: Any, dropout: float = 0.0) -> Any:
    """LoRA on every attention and MLP projection, its B matrices moved off their zero start (so each
    update counts in the values and the gradients)."""
    from peft import LoraConfig, get_peft_model

    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, lora_dropout=dropout, target_modules=targets))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.05, generator=torch.Generator().manual_seed(len(name)))
    return model


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "F.linear"])
@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_lora_takes_the_plain_forward_with_peft_logps_and_adapter_gradients(arch: str, packed: bool,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A LoRA run's learner adds the adapters' updates to the base products (packed or not): peft's
    values, and gradients on exactly the adapter weights (the base stays frozen), as peft's forward gives."""
    _measured(monkeypatch, packed)
    model = _lora_everywhere(qwen3() if arch == "qwen3" else tiny(arch="llama"))
    lm = plain_forward_lm(model)
    assert plain_forward.why_not(model, lm) is None
    batch = make_batch(lm.config.vocab_size, groups=3, group_size=4, shared=True, seed=5, completion=(1, 12))
    calls = Calls(monkeypatch)
    mine = step(model, batch, functools.partial(completion_logps, chunk_tokens=16), 0.8)
    assert calls.n >= 2  # the prompts once, then the completions
    assert mine[2] and all("lora_" in name for name in mine[2])
    assert len(mine[2]) == 2 * 7 * lm.config.num_hidden_layers  # A and B of every adapted projection
    with monkeypatch.context() as m:
        forced_transformers(m)
        theirs = step(model, batch, functools.partial(completion_logps, chunk_tokens=16), 0.8)
    assert_same(theirs, mine)
    with model.disable_adapter(), torch.no_grad():  # adapters off: the base model's values
        off, _ = completion_logps(model, batch, 0.8, chunk_tokens=16)
        base, _ = full_logits_logps(model, batch, 0.8)
    mask = batch.loss_mask
    torch.testing.assert_close(torch.where(mask, off, 0.0), torch.where(mask, base, 0.0), atol=1e-5, rtol=1e-5)
    assert not torch.allclose(torch.where(mask, off, 0.0), mine[0], atol=1e-3)


def test_lora_dropout_runs_in_the_plain_forward(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dropout on the adapters' inputs is applied in training mode (the values move with it) and not in eval mode."""
    model = _lora_everywhere(tiny(arch="llama"), dropout=0.5)
    batch = make_batch(plain_forward_lm(model).config.vocab_size, groups=2, group_size=3, seed=2)
    run = functools.partial(completion_logps, chunk_tokens=16)
    model.eval()
    with torch.no_grad():
        a, b = run(model, batch, 1.0)[0], run(model, batch, 1.0)[0]
        model.train()
        torch.manual_seed(0)
        c = run(model, batch, 1.0)[0]
    torch.testing.assert_close(a, b)
    assert not torch.allclose(torch.where(batch.loss_mask, c, 0.0), torch.where(batch.loss_mask, a, 0.0), atol=1e-4)


@pytest.fixture
def packing_pays(monkeypatch: pytest.MonkeyPatch) -> None:
    _measured(monkeypatch, packed=True)


@pytest.mark.usefixtures("packing_pays")
def test_frozen_base_weights_are_packed_once_until_an_adapter_is_merged() -> None:
    """A LoRA run packs its frozen base weights once and reuses them; merging an adapter (peft writes
    ``.data``) repacks; trained weights are packed anew every time."""
    from trainers.grpo.learn.packed_linear import learner_projections

    full = tiny(arch="llama")
    assert learner_projections(full) is not learner_projections(full)
    model = _lora_everywhere(tiny(arch="llama"))
    lm = plain_forward_lm(model)
    first = learner_projections(lm)
    assert first is not None and learner_projections(lm) is first
    batch = make_batch(lm.config.vocab_size, groups=2, group_size=3, seed=2)
    with torch.no_grad():
        before, _ = completion_logps(model, batch, 1.0, chunk_tokens=16)
        model.merge_adapter()
        assert learner_projections(lm) is not first
        merged, _ = completion_logps(model, batch, 1.0, chunk_tokens=16)
        model.unmerge_adapter()
        again, _ = completion_logps(model, batch, 1.0, chunk_tokens=16)
    mask = batch.loss_mask
    torch.testing.assert_close(torch.where(mask, merged, 0.0), torch.where(mask, before, 0.0), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(torch.where(mask, again, 0.0), torch.where(mask, before, 0.0), atol=1e-5, rtol=1e-5)


@pytest.mark.usefixtures("packing_pays")
def test_micro_batches_of_one_optimizer_step_pack_the_weights_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside `packed_once` (the learner's micro-batch loop) the trained weights are packed once for
    every pass, and the gradients still reach them; after an optimizer step they are packed anew."""
    from trainers.grpo.learn import packed_linear

    made: list[Any] = []

    class Counted(packed_linear.PackedProjections):
        def __init__(self, *a: Any, **k: Any) -> None:
            super().__init__(*a, **k)
            made.append(self)

    monkeypatch.setattr(packed_linear, "PackedProjections", Counted)
    model = tiny(arch="llama")
    batch = make_batch(model.config.vocab_size, groups=2, group_size=3, seed=2)
    halves = [batch.select(torch.arange(i, len(batch), 2)) for i in range(2)]
    run = functools.partial(completion_logps, chunk_tokens=16)
    with packed_linear.packed_once():
        for half in halves:
            logp, _ = run(model, half, 1.0)
            logp[half.loss_mask].sum().backward()
        with torch.no_grad():
            run(model, halves[0], 1.0)
        assert len(made) == 2  # one with autograd for both halves' passes, one without for the no-grad pass
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters() if p.requires_grad)
        with torch.no_grad():
            model.model.layers[0].mlp.down_proj.weight.add_(0.01)  # a weight written: the packing no longer fits
        run(model, halves[0], 1.0)
        assert len(made) == 3
    with packed_linear.packed_once():  # a new step packs anew
        run(model, halves[0], 1.0)
    assert len(made) == 4


def test_the_banner_names_the_learner_forward_and_why_not_the_plain_one() -> None:
    """vf-train's start-up line says which forward the learner runs (a LoRA run on the fast path, or why not)."""
    from trainers.grpo.learn.logprobs import learner_forward

    assert learner_forward(tiny(arch="llama")) == "plain ops"
    assert learner_forward(tiny(arch="llama"), autocast=True) == "transformers' (autocast)"
    assert learner_forward(_lora_everywhere(tiny(arch="llama"))) == "plain ops + LoRA updates"
    assert learner_forward(_dora(tiny(arch="llama"))).startswith("transformers' (layer 0 has a projection")
