"""KL estimators: the ANCHORS §3 vector and verl's clamps."""

from __future__ import annotations

import pytest
import torch

from trainers.grpo.algo.kl import KL_ESTIMATORS, get_kl_fn
from verifiers.errors import ConfigError


@pytest.mark.parametrize(
    ("name", "expected"),
    [("k1", 0.5), ("k2", 0.125), ("k3", 0.106531), ("low_var_kl", 0.106531), ("abs", 0.5)],
)
def test_anchor_vector(name: str, expected: float) -> None:
    value = KL_ESTIMATORS[name](
        torch.tensor(-1.0, dtype=torch.float64), torch.tensor(-1.5, dtype=torch.float64)
    )
    assert value.item() == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("name", sorted(KL_ESTIMATORS))
def test_zero_when_policy_equals_reference(name: str) -> None:
    logp = torch.tensor([-0.1, -2.0, -7.5])
    assert torch.equal(KL_ESTIMATORS[name](logp, logp.clone()), torch.zeros(3))


def test_k3_is_clamped_and_its_gradient_stays_finite() -> None:
    logp = torch.tensor([0.0, 0.0, -1.0], requires_grad=True)
    ref = torch.tensor([100.0, -100.0, -1.5])
    value = KL_ESTIMATORS["k3"](logp, ref)
    # d = 100 -> clamped to 20 -> exp(20) - 21 -> clamped to 10; d = -100 -> -20 -> 19 -> 10
    assert value[:2].tolist() == [10.0, 10.0]
    assert value[2].item() == pytest.approx(0.106531, abs=1e-6)
    value.sum().backward()
    assert logp.grad is not None and torch.isfinite(logp.grad).all()


def test_estimators_that_must_be_non_negative_are() -> None:
    gen = torch.Generator().manual_seed(0)
    logp = -torch.rand(200, generator=gen) * 5
    ref = -torch.rand(200, generator=gen) * 5
    for name in ("k2", "k3", "abs"):
        assert (KL_ESTIMATORS[name](logp, ref) >= 0).all()
    assert (KL_ESTIMATORS["k1"](logp, ref) < 0).any()  # k1 is unbiased but not pointwise positive


def test_unknown_estimator_lists_valid_names() -> None:
    with pytest.raises(ConfigError, match="abs, k1, k2, k3, low_var_kl"):
        get_kl_fn("k4")
