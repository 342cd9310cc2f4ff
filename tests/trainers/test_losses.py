"""Policy losses, aggregations and helpers: gradients, clip bounds and split invariance."""

from __future__ import annotations

import math

import pytest
import torch

from trainers.grpo.algo.losses import (
    AGGREGATIONS,
    POLICY_LOSSES,
    LossNormalizer,
    entropy_from_logits,
    expert_count,
    get_aggregation,
    get_policy_loss,
    importance_weights,
    mask_truncated,
    mix_loss,
)
from verifiers.errors import ConfigError

F64 = torch.float64
LENGTHS = [7, 3, 5, 1, 6, 2, 4, 7]


def _batch(seed: int = 0, lengths: list[int] = LENGTHS, width: int = 9):
    gen = torch.Generator().manual_seed(seed)
    b = len(lengths)
    mask = torch.arange(width).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
    logp = (-torch.rand(b, width, generator=gen, dtype=F64) * 2 - 0.05).requires_grad_(True)
    old = logp.detach() + 0.15 * torch.randn(b, width, generator=gen, dtype=F64)
    adv = torch.randn(b, generator=gen, dtype=F64)
    return logp, old, adv, mask


def _grad(loss: torch.Tensor, leaf: torch.Tensor) -> torch.Tensor:
    (g,) = torch.autograd.grad(loss, leaf)
    return g


def _weights(aggregation: str, mask: torch.Tensor, norm: LossNormalizer) -> torch.Tensor:
    """The per-token weight each aggregation gives a trained token (for expected gradients)."""
    m = mask.to(F64)
    if aggregation == "grpo":
        return m / m.sum(-1, keepdim=True).clamp(min=1) / norm.num_sequences
    if aggregation in ("bnpo", "dapo"):
        return m / norm.num_active_tokens
    return m / (norm.num_sequences * norm.max_completion_len)


# ----------------------------------------------------------------------------- normaliser
def test_normalizer_counts_rl_and_expert_rows_separately() -> None:
    mask = torch.tensor([[1, 1, 0], [0, 0, 0], [1, 0, 0], [1, 1, 1]])
    norm = LossNormalizer.from_batch(mask, is_expert=torch.tensor([False, False, False, True]))
    assert (norm.num_sequences, norm.num_active_tokens) == (2, 3)  # the empty row is not a sequence
    assert (norm.num_expert_sequences, norm.num_expert_tokens) == (1, 3)
    assert norm.max_completion_len == 3
    assert LossNormalizer.from_batch(mask, max_completion_len=64).max_completion_len == 64
    halves = [LossNormalizer.from_batch(mask[:2]), LossNormalizer.from_batch(mask[2:, :1])]
    merged = LossNormalizer.combine(halves)
    assert (merged.num_sequences, merged.num_active_tokens, merged.max_completion_len) == (3, 4, 3)
    expert = norm.for_expert()
    assert (expert.num_sequences, expert.num_active_tokens) == (1, 3)


# ----------------------------------------------------------------------------- REINFORCE limit
@pytest.mark.parametrize("loss_name", ["clipped", "gspo", "cispo"])
@pytest.mark.parametrize("aggregation", sorted(AGGREGATIONS))
def test_ratio_one_reduces_to_reinforce(loss_name: str, aggregation: str) -> None:
    logp, _, adv, mask = _batch()
    norm = LossNormalizer.from_batch(mask)
    per_token, _ = POLICY_LOSSES[loss_name](logp, logp.detach(), adv, mask)
    grad = _grad(AGGREGATIONS[aggregation](per_token, mask, norm), logp)
    expected = -adv.unsqueeze(-1) * _weights(aggregation, mask, norm)
    torch.testing.assert_close(grad, expected, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("loss_name", sorted(POLICY_LOSSES))
@pytest.mark.parametrize("aggregation", sorted(AGGREGATIONS))
def test_masked_tokens_contribute_nothing(loss_name: str, aggregation: str) -> None:
    logp, old, adv, mask = _batch()
    norm = LossNormalizer.from_batch(mask)
    per_token, _ = POLICY_LOSSES[loss_name](logp, old, adv, mask)
    loss = AGGREGATIONS[aggregation](per_token, mask, norm)
    grad = _grad(loss, logp)
    assert torch.equal(grad[~mask], torch.zeros_like(grad[~mask]))
    assert (grad[mask] != 0).any()
    # Garbage on masked positions changes neither the loss nor the gradient.
    noisy = torch.where(mask, logp.detach(), torch.full_like(logp, -55.0)).requires_grad_(True)
    noisy_old = torch.where(mask, old, torch.full_like(old, 30.0))
    per_token2, _ = POLICY_LOSSES[loss_name](noisy, noisy_old, adv, mask)
    loss2 = AGGREGATIONS[aggregation](per_token2, mask, norm)
    torch.testing.assert_close(loss2, loss.detach())
    torch.testing.assert_close(_grad(loss2, noisy), grad)


# ----------------------------------------------------------------------------- split invariance
SPLITS = [[8], [4, 4], [2, 2, 2, 2], [3, 5], [1, 6, 1]]


@pytest.mark.parametrize("loss_name", sorted(POLICY_LOSSES))
@pytest.mark.parametrize("aggregation", sorted(AGGREGATIONS))
def test_micro_batch_split_leaves_loss_and_gradient_unchanged(loss_name: str, aggregation: str) -> None:
    logp, old, adv, mask = _batch(seed=3)
    norm = LossNormalizer.from_batch(mask, max_completion_len=12)
    results = []
    for sizes in SPLITS:
        leaf = logp.detach().clone().requires_grad_(True)
        total = torch.zeros((), dtype=F64)
        start = 0
        for size in sizes:
            rows = slice(start, start + size)
            width = int(mask[rows].sum(-1).max())  # each micro-batch padded only to its own length
            per_token, _ = POLICY_LOSSES[loss_name](
                leaf[rows, :width], old[rows, :width], adv[rows], mask[rows, :width]
            )
            total = total + AGGREGATIONS[aggregation](per_token, mask[rows, :width], norm)
            start += size
        results.append((total.detach(), _grad(total, leaf)))
    for loss, grad in results[1:]:
        torch.testing.assert_close(loss, results[0][0], rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(grad, results[0][1], rtol=1e-12, atol=1e-14)


# ----------------------------------------------------------------------------- clipping
def _single_tokens(ratios: list[float], advs: list[float]):
    old = torch.zeros(len(ratios), 1, dtype=F64)
    logp = torch.log(torch.tensor(ratios, dtype=F64)).unsqueeze(-1).requires_grad_(True)
    return logp, old, torch.tensor(advs, dtype=F64), torch.ones(len(ratios), 1, dtype=torch.bool)


def test_clip_bounds_zero_the_gradient_only_in_the_clipped_direction() -> None:
    # ratio:  above hi, below lo, below lo, above hi, inside, inside
    ratios = [1.5, 0.5, 0.5, 1.5, 1.1, 0.9]
    advs = [1.0, 1.0, -1.0, -1.0, 2.0, -2.0]
    logp, old, adv, mask = _single_tokens(ratios, advs)
    per_token, metrics = POLICY_LOSSES["clipped"](logp, old, adv, mask, eps_low=0.2, eps_high=0.28)
    grad = _grad(per_token.sum(), logp).squeeze(-1)
    r = torch.tensor(ratios, dtype=F64)
    a = torch.tensor(advs, dtype=F64)
    expected = torch.where(torch.tensor([True, False, True, False, False, False]), 0.0, -a * r)
    torch.testing.assert_close(grad, expected)
    # values: clipped tokens sit at the bound, others at -A r
    torch.testing.assert_close(per_token.detach().squeeze(-1)[[0, 2]], torch.tensor([-1.28, 0.8], dtype=F64))
    assert metrics["clip_high"].squeeze(-1).tolist() == [1, 0, 0, 0, 0, 0]
    assert metrics["clip_low"].squeeze(-1).tolist() == [0, 0, 1, 0, 0, 0]
    assert metrics["clip_region"].squeeze(-1).tolist() == [1, 0, 1, 0, 0, 0]


def test_dual_clip_bounds_the_loss_of_negative_advantages() -> None:
    ratios = [5.0, 2.0, 5.0]
    advs = [-1.0, -1.0, 1.0]
    logp, old, adv, mask = _single_tokens(ratios, advs)
    per_token, metrics = POLICY_LOSSES["clipped"](logp, old, adv, mask, dual_clip=3.0)
    torch.testing.assert_close(per_token.detach().squeeze(-1), torch.tensor([3.0, 2.0, -1.2], dtype=F64))
    grad = _grad(per_token.sum(), logp).squeeze(-1)
    torch.testing.assert_close(grad, torch.tensor([0.0, 2.0, 0.0], dtype=F64))
    assert metrics["clip_dual"].squeeze(-1).tolist() == [1, 0, 0]
    plain, _ = POLICY_LOSSES["clipped"](logp, old, adv, mask)
    assert plain[0].item() == pytest.approx(5.0)  # without dual clip the loss grows with the ratio


# ----------------------------------------------------------------------------- GSPO
def test_gspo_uses_one_sequence_ratio_and_matches_the_sequence_level_gradient() -> None:
    logp, old, adv, mask = _batch(seed=5)
    old = logp.detach() + 0.001 * torch.randn(
        logp.shape, generator=torch.Generator().manual_seed(1), dtype=F64
    )
    norm = LossNormalizer.from_batch(mask)
    m = mask.to(F64)
    for aggregation in sorted(AGGREGATIONS):
        seq_log_ratio = ((logp - old) * m).sum(-1) / m.sum(-1)
        per_token, _ = POLICY_LOSSES["gspo"](logp, old, adv, mask)
        # every trained token of a sequence carries the same value -A s (inside the clip) or the bound
        s = torch.exp(seq_log_ratio.detach())
        clipped = torch.clamp(s, 1 - 3e-4, 1 + 4e-4)
        expected_value = torch.maximum(-adv * s, -adv * clipped).unsqueeze(-1).expand_as(per_token)
        torch.testing.assert_close(per_token.detach()[mask], expected_value[mask])
        grad = _grad(AGGREGATIONS[aggregation](per_token, mask, norm), logp)
        # reference: TRL's "sequence" importance level, the ratio with its full gradient
        ref_ratio = torch.exp(seq_log_ratio).unsqueeze(-1).expand_as(logp)
        a = adv.unsqueeze(-1)
        ref_per_token = torch.maximum(-a * ref_ratio, -a * torch.clamp(ref_ratio, 1 - 3e-4, 1 + 4e-4))
        ref_grad = _grad(AGGREGATIONS[aggregation](ref_per_token, mask, norm), logp)
        torch.testing.assert_close(grad, ref_grad, rtol=1e-10, atol=1e-14)


def test_gspo_clips_whole_sequences() -> None:
    # Row 0: every token ratio moved up by ~1%: the sequence ratio leaves [1-3e-4, 1+4e-4];
    # with A > 0 the whole sequence loses its gradient even though token 1 has ratio 1.
    logp = torch.zeros(2, 3, dtype=F64, requires_grad=True)
    old = torch.tensor([[-0.02, 0.0, -0.01], [0.0, 0.0, 0.0]], dtype=F64)
    mask = torch.ones(2, 3, dtype=torch.bool)
    per_token, metrics = POLICY_LOSSES["gspo"](logp, old, torch.tensor([1.0, 1.0], dtype=F64), mask)
    grad = _grad(per_token.sum(), logp)
    assert torch.equal(grad[0], torch.zeros(3, dtype=F64))
    torch.testing.assert_close(grad[1], torch.full((3,), -1.0, dtype=F64))
    assert metrics["clip_high"].tolist() == [[1, 1, 1], [0, 0, 0]]


# ----------------------------------------------------------------------------- CISPO and SFT
def test_cispo_keeps_the_gradient_of_clipped_tokens_weighted_by_the_clipped_ratio() -> None:
    ratios = [10.0, 1.5, 0.5]
    advs = [1.0, 1.0, -1.0]
    logp, old, adv, mask = _single_tokens(ratios, advs)
    per_token, metrics = POLICY_LOSSES["cispo"](logp, old, adv, mask, eps_low=1.0, eps_high=4.0)
    grad = _grad(per_token.sum(), logp).squeeze(-1)
    torch.testing.assert_close(grad, torch.tensor([-5.0, -1.5, 0.5], dtype=F64))  # -clip(r, 0, 5) A
    assert metrics["clip_high"].squeeze(-1).tolist() == [1, 0, 0]
    # the PPO surrogate would drop the first token entirely
    ppo, _ = POLICY_LOSSES["clipped"](logp, old, adv, mask)
    assert _grad(ppo.sum(), logp)[0].item() == 0.0


def test_sft_loss_is_negative_log_likelihood() -> None:
    logp, _, _, mask = _batch()
    per_token, metrics = POLICY_LOSSES["sft"](logp)
    norm = LossNormalizer.from_batch(mask)
    loss = AGGREGATIONS["bnpo"](per_token, mask, norm)
    torch.testing.assert_close(loss, -logp.detach()[mask].mean())
    assert metrics == {}


# ----------------------------------------------------------------------------- aggregations
def test_aggregations_follow_their_definitions() -> None:
    per_token = torch.tensor([[1.0, 2.0, 3.0, 0.0], [4.0, 0.0, 0.0, 0.0]], dtype=F64)
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]], dtype=torch.bool)
    norm = LossNormalizer.from_batch(mask, max_completion_len=10)
    assert AGGREGATIONS["grpo"](per_token, mask, norm).item() == pytest.approx((2.0 + 4.0) / 2)
    assert AGGREGATIONS["bnpo"](per_token, mask, norm).item() == pytest.approx(10.0 / 4)
    assert AGGREGATIONS["dapo"](per_token, mask, norm).item() == pytest.approx(10.0 / 4)
    assert AGGREGATIONS["dr_grpo"](per_token, mask, norm).item() == pytest.approx(10.0 / (2 * 10))


def test_unknown_names_list_valid_ones() -> None:
    with pytest.raises(ConfigError, match="bnpo, dapo, dr_grpo, grpo"):
        get_aggregation("mean")
    with pytest.raises(ConfigError, match="cispo, clipped, gspo, sft"):
        get_policy_loss("ppo2")


# ----------------------------------------------------------------------------- entropy
def test_entropy_from_logits_matches_the_definition_in_any_chunking() -> None:
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 11, generator=gen) * 4
    expected = torch.distributions.Categorical(logits=logits).entropy()
    for chunk in (1, 4, 1024):
        torch.testing.assert_close(entropy_from_logits(logits, chunk_size=chunk), expected)
    uniform = entropy_from_logits(torch.zeros(2, 8))
    torch.testing.assert_close(uniform, torch.full((2,), math.log(8)))


def test_entropy_handles_banned_tokens_and_low_precision() -> None:
    logits = torch.tensor([[0.0, 0.0, -torch.inf, 1000.0], [0.0, 0.0, -torch.inf, -torch.inf]])
    leaf = logits.clone().requires_grad_(True)
    h = entropy_from_logits(leaf)
    torch.testing.assert_close(h, torch.tensor([0.0, math.log(2)]))
    h.sum().backward()
    assert leaf.grad is not None and torch.isfinite(leaf.grad).all()
    assert entropy_from_logits(torch.randn(2, 3, 7).to(torch.bfloat16)).dtype == torch.float32


# ----------------------------------------------------------------------------- helpers
def test_mask_truncated_drops_whole_rows_and_keeps_dtype() -> None:
    mask = torch.ones(3, 4, dtype=torch.long)
    out = mask_truncated(mask, torch.tensor([False, True, False]))
    assert out.dtype == torch.long and out.sum(-1).tolist() == [4, 0, 4]
    out_bool = mask_truncated(mask.bool(), torch.tensor([True, False, False]))
    assert out_bool.dtype == torch.bool and out_bool.sum(-1).tolist() == [0, 4, 4]
    with pytest.raises(ConfigError, match="is_truncated"):
        mask_truncated(mask, torch.tensor([True]))


def test_importance_weights_token_and_sequence_levels() -> None:
    old = torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]], dtype=F64)
    sampler = torch.tensor([[-0.5, -0.5, 5.0], [0.1, -2.0, 0.0]], dtype=F64)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    token = importance_weights(old, sampler, mask, cap=3.0, mode="truncate", level="token")
    e = math.exp
    torch.testing.assert_close(token, torch.tensor([[e(0.5), e(0.5), 1.0], [e(-0.1), 3.0, 1.0]], dtype=F64))
    token_mask = importance_weights(old, sampler, mask, cap=3.0, mode="mask", level="token")
    assert token_mask[1, 1].item() == 0.0 and token_mask[1, 0].item() == pytest.approx(e(-0.1))
    # sequence level: the product of token ratios over trained tokens (the masked 5.0 is ignored)
    seq = importance_weights(old, sampler, mask, cap=3.0, mode="truncate", level="sequence")
    torch.testing.assert_close(seq[0], torch.full((3,), e(1.0), dtype=F64))
    torch.testing.assert_close(seq[1], torch.full((3,), 3.0, dtype=F64))  # e(1.9) > 3 -> cap
    seq_mask = importance_weights(old, sampler, mask, cap=3.0, mode="mask", level="sequence")
    assert seq_mask[1].tolist() == [0.0, 0.0, 0.0] and seq_mask[0, 0].item() == pytest.approx(e(1.0))
    huge = importance_weights(old, sampler - 1000.0, mask, mode="truncate")
    assert torch.isfinite(huge).all() and huge.max().item() == pytest.approx(3.0)
    with pytest.raises(ConfigError, match="cap"):
        importance_weights(old, sampler, mask, cap=0.0)


def test_expert_count_and_mix_loss() -> None:
    assert expert_count(0.25, 256) == 64
    assert 256 - expert_count(0.25, 256) == 192
    assert expert_count(0.1, 30) == 3  # 0.1 * 30 = 3.0000000000000004 in floats
    assert expert_count(0.1, 31) == 4
    assert expert_count(0.0, 10) == 0
    with pytest.raises(ConfigError, match="expert ratio"):
        expert_count(1.5, 10)
    value = mix_loss(torch.tensor(2.0, dtype=F64), torch.tensor(10.0, dtype=F64), mu=0.1)
    assert value.item() == pytest.approx(0.9 * 2.0 + 0.1 * 10.0)
