"""Advantage estimators: the ANCHORS §3 vectors, explicit groups, and the zero conventions."""

from __future__ import annotations

import pytest
import torch

from trainers.grpo.algo.advantages import ADVANTAGES, get_advantage_fn, group_stats
from verifiers.errors import ConfigError

REWARDS = [0.9, 0.8, 0.7, 0.6, 0.9, 0.5]
GROUPS = [0, 0, 0, 1, 1, 1]
UNSCALED = [0.1, 0.0, -0.1, -0.0667, 0.2333, -0.1667]
SCALED = [0.999, 0.0, -0.999, -0.3201, 1.1204, -0.8003]


def _t(values, dtype=torch.float32):
    return torch.tensor(values, dtype=dtype)


def _ids(values):
    return torch.tensor(values, dtype=torch.int64)


def test_anchor_vector_unscaled() -> None:
    for name, kwargs in (("grpo", {"scale": "none"}), ("dr_grpo", {})):
        adv = ADVANTAGES[name](_t(REWARDS), _ids(GROUPS), **kwargs)
        torch.testing.assert_close(adv, _t(UNSCALED), atol=1e-4, rtol=0)


def test_anchor_vector_scaled_by_group_std() -> None:
    adv = ADVANTAGES["grpo"](_t(REWARDS), _ids(GROUPS), scale="group", eps=1e-4)
    torch.testing.assert_close(adv, _t(SCALED), atol=1e-4, rtol=0)


def test_groups_come_from_ids_not_row_order() -> None:
    # The same rows interleaved: each row keeps its advantage, because groups are the ids.
    perm = [3, 0, 4, 1, 5, 2]
    adv = ADVANTAGES["grpo"](_t([REWARDS[i] for i in perm]), _ids([GROUPS[i] for i in perm]), scale="group")
    expected = ADVANTAGES["grpo"](_t(REWARDS), _ids(GROUPS), scale="group")
    torch.testing.assert_close(adv, expected[perm])


def test_same_prompt_twice_forms_two_groups() -> None:
    # Two groups sampled from the same prompt in one step: ids 7 and 9, different baselines.
    rewards = _t([1.0, 0.0, 1.0, 1.0, 1.0, 0.0], torch.float64)
    adv = ADVANTAGES["grpo"](rewards, _ids([7, 7, 7, 9, 9, 9]), scale="none")
    torch.testing.assert_close(adv[:3], rewards[:3] - 2 / 3)
    torch.testing.assert_close(adv[3:], rewards[3:] - 2 / 3)
    merged = ADVANTAGES["grpo"](_t([1.0, 0.0, 1.0, 0.0], torch.float64), _ids([7, 7, 9, 9]), scale="none")
    torch.testing.assert_close(merged, _t([0.5, -0.5, 0.5, -0.5], torch.float64))


@pytest.mark.parametrize(
    ("name", "scale"),
    [(n, s) for n in sorted(ADVANTAGES) for s in ("group", "batch", "none") if n != "dr_grpo" or s == "none"],
)
def test_singletons_and_equal_groups_give_exactly_zero(name: str, scale: str) -> None:
    # 0.1 three times: R - mean is not exactly 0 in float arithmetic, the result must be.
    rewards = _t([0.1, 0.1, 0.1, 0.7, 0.3, 0.9])
    ids = _ids([0, 0, 0, 1, 2, 2])
    adv = ADVANTAGES[name](rewards, ids, scale=scale, eps=1e-6)
    assert torch.equal(adv[:4], torch.zeros(4))
    assert adv[4] < 0 < adv[5]


def test_batch_scale_divides_by_std_of_all_rewards() -> None:
    rewards = _t(REWARDS, torch.float64)
    adv = ADVANTAGES["grpo"](rewards, _ids(GROUPS), scale="batch", eps=1e-4)
    unscaled = ADVANTAGES["grpo"](rewards, _ids(GROUPS), scale="none")
    torch.testing.assert_close(adv, unscaled / (rewards.std(unbiased=True) + 1e-4))


def test_rloo_subtracts_the_mean_of_the_other_rows() -> None:
    rewards = _t([1.0, 0.0, 0.5, 2.0, 4.0], torch.float64)
    adv = ADVANTAGES["rloo"](rewards, _ids([0, 0, 0, 1, 1]), scale="none")
    expected = [1.0 - 0.25, 0.0 - 0.75, 0.5 - 0.5, 2.0 - 4.0, 4.0 - 2.0]
    torch.testing.assert_close(adv, _t(expected, torch.float64))


def test_output_dtype_follows_rewards_and_carries_no_graph() -> None:
    rewards = torch.tensor(REWARDS, dtype=torch.float32, requires_grad=True)
    adv = ADVANTAGES["grpo"](rewards, _ids(GROUPS))
    assert adv.dtype == torch.float32 and not adv.requires_grad
    assert ADVANTAGES["grpo"](_t(REWARDS, torch.bfloat16), _ids(GROUPS)).dtype == torch.bfloat16


def test_invalid_arguments_name_the_fix() -> None:
    with pytest.raises(ConfigError, match="scale='none'"):
        ADVANTAGES["dr_grpo"](_t(REWARDS), _ids(GROUPS), scale="group")
    with pytest.raises(ConfigError, match="group, batch, none"):
        ADVANTAGES["grpo"](_t(REWARDS), _ids(GROUPS), scale="sequence")
    with pytest.raises(ConfigError, match="one group id per row"):
        ADVANTAGES["grpo"](_t(REWARDS), _ids(GROUPS[:4]))
    with pytest.raises(ConfigError, match="integer"):
        ADVANTAGES["grpo"](_t(REWARDS), _t(GROUPS))
    with pytest.raises(ConfigError, match="dr_grpo, grpo, rloo"):
        get_advantage_fn("ppo")


def test_group_stats_report_zero_signal_rows() -> None:
    rewards = _t([1.0, 1.0, 0.0, 1.0, 0.5], torch.float64)
    stats = group_stats(rewards, _ids([0, 0, 1, 1, 2]))
    assert stats.zero_std_mask.tolist() == [True, True, False, False, True]
    torch.testing.assert_close(stats.frac_reward_zero_std, torch.tensor(3 / 5))
    # group std per row: 0, 0, sqrt(0.5), sqrt(0.5), 0 (singleton)
    torch.testing.assert_close(stats.reward_std, torch.tensor(2 * 0.5**0.5 / 5, dtype=torch.float32))
    mask, frac, std = group_stats(_t(REWARDS), _ids(GROUPS))
    assert not mask.any() and frac == 0 and std > 0
