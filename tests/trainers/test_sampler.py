"""RepeatSampler: the ANCHORS §4 layout, seeding, and resuming from a state dict."""

from __future__ import annotations

import itertools
import json

import pytest
import torch

from trainers.grpo.data.sampler import RepeatSampler
from verifiers.errors import ConfigError


def test_anchor_example_without_shuffle() -> None:
    sampler = RepeatSampler(list("abcdefg"), mini_repeat_count=2, batch_size=3, repeat_count=4, shuffle=False)
    expected = [0, 0, 1, 1, 2, 2] * 4 + [3, 3, 4, 4, 5, 5] * 4
    assert list(sampler) == expected
    assert len(sampler) == len(expected) == (7 // 3) * 3 * 2 * 4
    assert 6 not in list(sampler)


@pytest.mark.parametrize(
    ("n", "g", "batch", "repeat"), [(10, 4, 3, 1), (5, 1, 5, 2), (2, 3, 4, 1), (9, 2, 1, 3)]
)
def test_length_and_layout_with_shuffle(n: int, g: int, batch: int, repeat: int) -> None:
    sampler = RepeatSampler(n, mini_repeat_count=g, batch_size=batch, repeat_count=repeat, seed=3)
    out = list(sampler)
    assert len(out) == len(sampler) == (n // batch) * batch * g * repeat
    chunk_len = batch * g * repeat
    seen: list[int] = []
    for start in range(0, len(out), chunk_len):
        chunk = out[start : start + chunk_len]
        block = chunk[: batch * g]
        assert chunk == block * repeat  # the chunk repeats repeat_count times
        uniques = block[::g]
        assert block == [i for i in uniques for _ in range(g)]  # each index G times in a row
        assert len(set(uniques)) == batch
        seen.extend(uniques)
    assert len(set(seen)) == len(seen)  # no prompt twice in an epoch


def test_seeded_order_is_reproducible_and_independent_of_the_global_rng() -> None:
    torch.manual_seed(0)
    first = list(RepeatSampler(50, mini_repeat_count=2, batch_size=5, seed=11))
    torch.manual_seed(12345)
    torch.rand(100)
    again = list(RepeatSampler(50, mini_repeat_count=2, batch_size=5, seed=11))
    other = list(RepeatSampler(50, mini_repeat_count=2, batch_size=5, seed=12))
    assert first == again
    assert first != other
    assert sorted(first) == sorted(other)


def test_each_epoch_draws_a_new_permutation() -> None:
    sampler = RepeatSampler(30, mini_repeat_count=1, batch_size=30, seed=0)
    epoch0, epoch1 = list(sampler), list(sampler)
    assert epoch0 != epoch1 and sorted(epoch0) == sorted(epoch1) == list(range(30))
    assert sampler.epoch == 2


def test_resume_mid_epoch_continues_the_same_order() -> None:
    kwargs = {"mini_repeat_count": 3, "batch_size": 4, "repeat_count": 2, "seed": 5}
    reference = RepeatSampler(13, **kwargs)
    uninterrupted = list(itertools.chain(reference, reference, reference))

    run = RepeatSampler(13, **kwargs)
    taken = list(run)  # one full epoch
    taken += list(itertools.islice(iter(run), 17))  # part of the second
    state = json.loads(json.dumps(run.state_dict()))  # plain Python, survives JSON

    resumed = RepeatSampler(13, **kwargs)
    resumed.load_state_dict(state)
    taken += list(resumed)  # rest of epoch two
    taken += list(resumed)  # epoch three
    assert taken == uninterrupted


def test_breaking_out_and_iterating_again_continues_the_epoch() -> None:
    sampler = RepeatSampler(8, mini_repeat_count=1, batch_size=2, seed=1)
    full = list(RepeatSampler(8, mini_repeat_count=1, batch_size=2, seed=1))
    head = list(itertools.islice(iter(sampler), 3))
    assert head + list(sampler) == full


def test_state_from_other_settings_is_refused() -> None:
    state = RepeatSampler(10, mini_repeat_count=2, batch_size=2).state_dict()
    with pytest.raises(ConfigError, match="num_samples"):
        RepeatSampler(11, mini_repeat_count=2, batch_size=2).load_state_dict(state)
    with pytest.raises(ConfigError, match="batch_size"):
        RepeatSampler(10, mini_repeat_count=2, batch_size=5).load_state_dict(state)


def test_invalid_settings_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="mini_repeat_count"):
        RepeatSampler(10, mini_repeat_count=0)
    with pytest.raises(ConfigError, match="batch_size"):
        RepeatSampler(10, mini_repeat_count=2, batch_size=0)
