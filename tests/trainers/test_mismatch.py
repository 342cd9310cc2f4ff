"""The sampler-versus-learner logprob gap (``sampler/*`` metrics): what it measures and how ranks combine."""

from __future__ import annotations

import math

import pytest
import torch

from trainers.grpo.algo.mismatch import MismatchStats


def test_gap_and_ratio_over_masked_tokens_only() -> None:
    learner = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, -9.0]])
    sampler = torch.tensor([[-1.0, -2.5, -1.0], [-0.5, -0.1, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])  # the last column (a big gap) is not trained
    stats = MismatchStats()
    stats.add(learner, sampler, mask)
    m = stats.metrics()
    assert stats.tokens == 4
    assert m["sampler/logp_diff_mean"] == pytest.approx((0 + 0.5 + 0 + 0.4) / 4)
    assert m["sampler/logp_diff_max"] == pytest.approx(0.5)
    assert m["sampler/ratio_max"] == pytest.approx(math.exp(0.5))
    assert m["sampler/ratio_min"] == pytest.approx(math.exp(-0.4))
    assert m["sampler/ratio_mean"] == pytest.approx((1 + math.exp(0.5) + 1 + math.exp(-0.4)) / 4)


def test_ranks_combine_to_the_statistics_of_the_union() -> None:
    a, b, both = MismatchStats(), MismatchStats(), MismatchStats()
    x = torch.tensor([[-1.0, -2.0]])
    y = torch.tensor([[-1.2, -1.0]])
    ones = torch.ones(1, 2)
    a.add(x, y, ones)
    b.add(y, x, ones)
    both.add(torch.cat([x, y]), torch.cat([y, x]), torch.ones(2, 2))
    assert MismatchStats.combine([a, b]).metrics() == pytest.approx(both.metrics())


def test_nothing_measured_reports_nothing() -> None:
    stats = MismatchStats()
    stats.add(torch.zeros(2, 3), torch.ones(2, 3), torch.zeros(2, 3))
    assert stats.metrics() == {}
