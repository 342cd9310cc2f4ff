"""The learner's packed projections (`trainers.grpo.learn.packed_linear`): F.linear's values and gradients.

The full model is checked against transformers in `test_plain_forward.py` (Llama, Qwen2 with
biases, Qwen3); here one product is checked in every shape the learner feeds it, so a wrong
gradient names the tensor it is wrong for.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from trainers.grpo.learn.packed_linear import _Linear, learner_projections  # noqa: E402
from verifiers.inference.engine.projections import ModuleProjections  # noqa: E402
from verifiers.models.tiny import TinyModelSpec, build_tiny_model  # noqa: E402


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("shape", [(9, 24), (3, 5, 24)], ids=["rows", "batch-by-time"])
@pytest.mark.parametrize("input_grad", [True, False], ids=["input-grad", "no-input-grad"])
def test_values_and_gradients_are_f_linears(bias: bool, shape: tuple[int, ...], input_grad: bool) -> None:
    torch.manual_seed(0)
    w = torch.randn(40, 24, requires_grad=True)
    b = torch.randn(40, requires_grad=True) if bias else None
    x = torch.randn(*shape, requires_grad=input_grad)
    dy = torch.randn(*shape[:-1], 40)

    got = _Linear(w, b).apply(x)
    grads = torch.autograd.grad(got, [t for t in (x, w, b) if t is not None and t.requires_grad], dy)
    want = torch.nn.functional.linear(x, w, b)
    wanted = torch.autograd.grad(want, [t for t in (x, w, b) if t is not None and t.requires_grad], dy)

    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert len(grads) == len(wanted) == 1 + bias + input_grad
    for g, h in zip(grads, wanted, strict=True):
        torch.testing.assert_close(g, h, atol=1e-4, rtol=1e-5)


def test_fused_projections_give_each_module_its_own_gradient() -> None:
    """Query/key/value and gate/up run as one product each; every module's weight still gets its own .grad."""
    model, _ = build_tiny_model(TinyModelSpec(arch="qwen2", hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                              num_attention_heads=4, num_key_value_heads=2))
    x = torch.randn(2, 6, 32)
    grads = {}
    for name, proj in (("packed", learner_projections(model, packed=True)), ("plain", ModuleProjections(model))):
        model.zero_grad()
        q, k, v = proj.qkv(0, x)
        (q.square().sum() + k.sum() + v.pow(3).sum() + proj.mlp(0, x).square().sum() + proj.o(0, q).sum()).backward()
        grads[name] = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    assert set(grads["packed"]) == set(grads["plain"])
    assert any(n.endswith("q_proj.bias") for n in grads["packed"])
    for n, g in grads["plain"].items():
        torch.testing.assert_close(grads["packed"][n], g, atol=1e-4, rtol=1e-4, msg=n)


def test_peak_memory_counts_packed_weights() -> None:
    """The CPU memory tracker the learner's bounds are proven with sees oneDNN's opaque packed tensors."""
    from trainers.testing.memory import PeakMemory
    from verifiers.inference.engine.projections import pack

    weight = torch.randn(256, 128)
    with PeakMemory() as mem:
        packed = pack(weight, 64)
        held = mem.live_bytes
        del packed
    assert held >= weight.numel() * 4 and mem.peak_bytes == held
    assert mem.live_bytes == 0
