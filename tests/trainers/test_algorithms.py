"""Algorithm presets and compute_loss: every preset trains, MIX is exact, splits do not matter."""

from __future__ import annotations

import pytest
import torch

from trainers.grpo.algo.algorithms import ALGORITHMS, compute_loss, get_algorithm
from trainers.grpo.algo.losses import AGGREGATIONS, LossNormalizer, entropy_from_logits
from verifiers.errors import ConfigError

F64 = torch.float64
LENGTHS = [6, 2, 5, 1, 6, 3, 4, 6]


def _inputs(seed: int = 0, lengths: list[int] = LENGTHS, width: int = 7, vocab: int = 5):
    gen = torch.Generator().manual_seed(seed)
    b = len(lengths)
    logits = torch.randn(b, width, vocab, generator=gen, dtype=F64).requires_grad_(True)
    tokens = torch.randint(0, vocab, (b, width), generator=gen)
    mask = torch.arange(width).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
    with torch.no_grad():
        base = torch.log_softmax(logits, -1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    return {
        "logits": logits,
        "tokens": tokens,
        "old_logp": base + 0.2 * torch.randn(b, width, generator=gen, dtype=F64),
        "ref_logp": base + 0.3 * torch.randn(b, width, generator=gen, dtype=F64),
        "sampler_logp": base + 0.1 * torch.randn(b, width, generator=gen, dtype=F64),
        "advantages": torch.randn(b, generator=gen, dtype=F64),
        "loss_mask": mask,
        "is_expert": torch.tensor([False, False, True, False, False, False, True, False]),
    }


def _call(preset, data, rows=slice(None), width=None, normalizer=None, **extra):
    """Run compute_loss on a row slice of ``data`` (optionally trimmed to ``width`` columns)."""
    cols = slice(None) if width is None else slice(0, width)
    logits = data["logits"][rows, cols]
    logp = torch.log_softmax(logits, -1).gather(-1, data["tokens"][rows, cols].unsqueeze(-1)).squeeze(-1)
    kwargs = {
        "logp": logp,
        "old_logp": data["old_logp"][rows, cols],
        "ref_logp": data["ref_logp"][rows, cols],
        "sampler_logp": data["sampler_logp"][rows, cols],
        "advantages": data["advantages"][rows],
        "loss_mask": data["loss_mask"][rows, cols],
        "is_expert": data["is_expert"][rows] if preset.mix is not None else None,
        "entropy": entropy_from_logits(logits).to(F64),
        "normalizer": normalizer,
    }
    kwargs.update(extra)
    return compute_loss(preset, **kwargs)


def _full_normalizer(preset, data) -> LossNormalizer:
    is_expert = data["is_expert"] if preset.mix is not None else None
    return LossNormalizer.from_batch(data["loss_mask"], is_expert=is_expert, max_completion_len=16)


def _rich(name: str):
    """A preset with every optional term switched on, to exercise the whole path."""
    return get_algorithm(name, beta=0.04, entropy_coef=0.01, off_policy={"cap": 2.0, "mode": "truncate"})


# ----------------------------------------------------------------------------- presets
@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_preset_computes_a_finite_loss_and_gradient(name: str) -> None:
    data = _inputs()
    for preset in (ALGORITHMS[name], _rich(name)):
        loss, metrics = _call(preset, data, normalizer=_full_normalizer(preset, data))
        (grad,) = torch.autograd.grad(loss, data["logits"])
        assert loss.dim() == 0 and torch.isfinite(loss)
        assert torch.isfinite(grad).all() and grad.abs().sum() > 0
        assert all(torch.isfinite(v) for v in metrics.values())
        assert metrics["loss"] == loss.detach()


def test_presets_encode_their_papers_settings() -> None:
    dapo, gspo, cispo, dr, mix = (ALGORITHMS[n] for n in ("dapo", "gspo", "cispo", "dr_grpo", "mix"))
    assert (dapo.eps_low, dapo.eps_high, dapo.aggregation, dapo.beta) == (0.2, 0.28, "dapo", 0.0)
    assert dapo.filter_zero_std_groups and dapo.mask_truncated_completions
    assert (gspo.policy_loss, gspo.eps_low, gspo.eps_high) == ("gspo", 3e-4, 4e-4)
    assert (cispo.policy_loss, cispo.eps_low, cispo.eps_high) == ("cispo", 1.0, 4.0)
    assert (dr.advantage, dr.scale, dr.aggregation) == ("dr_grpo", "none", "dr_grpo")
    assert mix.mix is not None and (mix.mix.mu, mix.mix.expert_ratio) == (0.1, 0.25)
    assert not any(p.uses_reference for p in ALGORITHMS.values())  # beta 0: no reference model by default
    for name, preset in ALGORITHMS.items():
        assert preset.name == name


def test_get_algorithm_overrides_are_validated() -> None:
    preset = get_algorithm("grpo", beta=0.001, off_policy={"cap": 2.0})
    assert preset.beta == 0.001 and preset.uses_reference
    assert preset.off_policy is not None and (preset.off_policy.cap, preset.off_policy.mode) == (2.0, "mask")
    assert get_algorithm("mix", mix={"mu": 0.5}).mix.mu == 0.5  # type: ignore[union-attr]
    assert get_algorithm("mix", mix={"mu": 0.5}).mix.expert_ratio == 0.25  # type: ignore[union-attr]
    assert ALGORITHMS["grpo"].beta == 0.0  # the table is not modified
    with pytest.raises(ConfigError, match="cispo, dapo, dr_grpo, grpo, gspo, mix"):
        get_algorithm("ppo")
    with pytest.raises(ConfigError, match="betta"):
        get_algorithm("grpo", betta=0.1)
    with pytest.raises(ConfigError, match="dual_clip"):
        get_algorithm("grpo", dual_clip=0.5)
    with pytest.raises(ConfigError, match="scale='none'"):
        get_algorithm("dr_grpo", scale="group")
    with pytest.raises(ConfigError, match="kl_estimator"):
        get_algorithm("grpo", kl_estimator="k7")


# ----------------------------------------------------------------------------- split invariance
@pytest.mark.parametrize("name", sorted(ALGORITHMS))
@pytest.mark.parametrize("sizes", [[4, 4], [2, 2, 2, 2], [3, 5], [1, 1, 6]])
def test_micro_batches_sum_to_the_full_batch(name: str, sizes: list[int]) -> None:
    data = _inputs(seed=1)
    preset = _rich(name)
    norm = _full_normalizer(preset, data)
    full_loss, full_metrics = _call(preset, data, normalizer=norm)
    (full_grad,) = torch.autograd.grad(full_loss, data["logits"])
    total = torch.zeros((), dtype=F64)
    summed: dict[str, torch.Tensor] = {}
    start = 0
    for size in sizes:
        rows = slice(start, start + size)
        width = max(int(data["loss_mask"][rows].sum(-1).max()), 1)
        loss, metrics = _call(preset, data, rows=rows, width=width, normalizer=norm)
        total = total + loss
        for key, value in metrics.items():
            summed[key] = summed.get(key, 0) + value
        start += size
    (grad,) = torch.autograd.grad(total, data["logits"])
    torch.testing.assert_close(total.detach(), full_loss.detach(), rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(grad, full_grad, rtol=1e-10, atol=1e-14)
    assert summed.keys() == full_metrics.keys()
    for key, value in full_metrics.items():
        torch.testing.assert_close(summed[key].to(F64), value.to(F64), rtol=1e-5, atol=1e-7)


# ----------------------------------------------------------------------------- MIX
def test_mix_is_exactly_weighted_grpo_plus_sft() -> None:
    # ANCHORS §4: 3 usual rows + 1 expert row, mu = 0.1 -> 0.9 x grpo + 0.1 x sft.
    data = _inputs(seed=2, lengths=[5, 3, 6, 4])
    data["is_expert"] = torch.tensor([False, False, True, False])
    usual = torch.tensor([0, 1, 3])
    mix = ALGORITHMS["mix"]
    grpo = ALGORITHMS["grpo"]
    mix_loss, metrics = _call(mix, data, normalizer=_full_normalizer(mix, data))
    # GRPO alone on the three usual rows, with their own normaliser
    usual_norm = LossNormalizer.from_batch(data["loss_mask"][usual], max_completion_len=16)
    grpo_loss, _ = _call(grpo, data, rows=usual, normalizer=usual_norm)
    # SFT: mean -log pi over the expert row's trained tokens
    logp = torch.log_softmax(data["logits"], -1).gather(-1, data["tokens"].unsqueeze(-1)).squeeze(-1)
    sft = -logp[2][data["loss_mask"][2]].mean()
    torch.testing.assert_close(mix_loss, 0.9 * grpo_loss + 0.1 * sft, rtol=1e-14, atol=1e-15)
    torch.testing.assert_close(metrics["loss/rl"], grpo_loss.detach(), rtol=1e-14, atol=1e-15)
    torch.testing.assert_close(metrics["loss/sft"], sft.detach(), rtol=1e-14, atol=1e-15)


def test_expert_rows_need_the_mix_algorithm() -> None:
    data = _inputs()
    preset = ALGORITHMS["grpo"]
    with pytest.raises(ConfigError, match="mix"):
        _call(preset, data, normalizer=_full_normalizer(preset, data), is_expert=data["is_expert"])


# ----------------------------------------------------------------------------- terms
def test_on_policy_default_equals_old_logp_from_the_current_policy() -> None:
    data = _inputs()
    preset = ALGORITHMS["grpo"]
    norm = _full_normalizer(preset, data)
    logp = torch.log_softmax(data["logits"], -1).gather(-1, data["tokens"].unsqueeze(-1)).squeeze(-1)
    implicit, _ = _call(preset, data, normalizer=norm, old_logp=None)
    explicit, _ = _call(preset, data, normalizer=norm, old_logp=logp.detach())
    torch.testing.assert_close(implicit, explicit)


def test_kl_and_entropy_terms_are_added_with_their_coefficients() -> None:
    data = _inputs()
    base = ALGORITHMS["dapo"]
    norm = _full_normalizer(base, data)
    plain, metrics = _call(base, data, normalizer=norm)
    with_kl, _ = _call(get_algorithm("dapo", beta=0.5), data, normalizer=norm)
    with_entropy, _ = _call(get_algorithm("dapo", entropy_coef=0.2), data, normalizer=norm)
    # dapo aggregation is the token mean, so the terms add their token means
    torch.testing.assert_close(with_kl, plain + 0.5 * metrics["kl"].to(F64))
    torch.testing.assert_close(with_entropy, plain - 0.2 * metrics["entropy"].to(F64), rtol=1e-6, atol=1e-7)


def test_off_policy_mask_drops_sequences_beyond_the_cap() -> None:
    data = _inputs()
    data["sampler_logp"] = data["old_logp"].clone()
    data["sampler_logp"][0] -= 5.0  # row 0 is far off-policy: sequence weight exp(5 x len) > 3
    preset = get_algorithm("grpo", off_policy={})
    norm = _full_normalizer(preset, data)
    loss, metrics = _call(preset, data, normalizer=norm)
    (grad,) = torch.autograd.grad(loss, data["logits"])
    assert torch.equal(grad[0], torch.zeros_like(grad[0]))
    assert grad[1].abs().sum() > 0
    expected_frac = LENGTHS[0] / sum(LENGTHS)
    assert metrics["off_policy/masked_frac"].item() == pytest.approx(expected_frac)


def test_missing_inputs_for_switched_on_terms_are_errors() -> None:
    data = _inputs()
    norm = _full_normalizer(ALGORITHMS["grpo"], data)
    with pytest.raises(ConfigError, match="ref_logp"):
        _call(get_algorithm("grpo", beta=0.1), data, normalizer=norm, ref_logp=None)
    with pytest.raises(ConfigError, match="sampler_logp"):
        _call(get_algorithm("grpo", off_policy={}), data, normalizer=norm, sampler_logp=None)
    with pytest.raises(ConfigError, match="entropy"):
        _call(get_algorithm("grpo", entropy_coef=0.1), data, normalizer=norm, entropy=None)


def test_nan_on_padding_does_not_reach_the_gradient() -> None:
    data = _inputs()
    preset = _rich("grpo")
    norm = _full_normalizer(preset, data)
    clean, _ = _call(preset, data, normalizer=norm)
    (clean_grad,) = torch.autograd.grad(clean, data["logits"])
    pad = ~data["loss_mask"]
    for key in ("old_logp", "ref_logp", "sampler_logp"):
        data[key] = data[key].masked_fill(pad, float("nan"))
    dirty, _ = _call(preset, data, normalizer=norm)
    (dirty_grad,) = torch.autograd.grad(dirty, data["logits"])
    torch.testing.assert_close(dirty, clean)
    torch.testing.assert_close(dirty_grad, clean_grad)


def test_every_aggregation_is_reachable_from_a_preset() -> None:
    used = {p.aggregation for p in ALGORITHMS.values()} | {p.sft_aggregation for p in ALGORITHMS.values()}
    assert used == set(AGGREGATIONS)
