"""DataOrder: seeded per-epoch permutations that resume exactly from a checkpoint."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from verifiers.data import DataOrder, epoch_permutation
from verifiers.errors import ConfigError


def test_each_epoch_is_a_permutation_reshuffled_with_seed_plus_epoch() -> None:
    order = DataOrder(10, seed=3)
    e0 = order.next_indices(10)
    e1 = order.next_indices(10)
    assert sorted(e0) == list(range(10)) and sorted(e1) == list(range(10))
    assert e0 == epoch_permutation(10, 3) and e1 == epoch_permutation(10, 4)
    assert e0 != e1
    assert order.epoch == 2 and order.position == 0


def test_same_seed_same_order_different_seed_different_order() -> None:
    assert DataOrder(50, seed=1).next_indices(50) == DataOrder(50, seed=1).next_indices(50)
    assert DataOrder(50, seed=1).next_indices(50) != DataOrder(50, seed=2).next_indices(50)


def test_no_shuffle_is_sequential_and_batches_span_epochs() -> None:
    order = DataOrder(5, shuffle=False)
    assert order.next_indices(3) == [0, 1, 2]
    assert order.next_indices(3) == [3, 4, 0]
    assert order.epoch == 1 and order.position == 1


def test_drop_last_never_spans_epochs() -> None:
    order = DataOrder(5, shuffle=False, drop_last=True)
    assert order.next_indices(2) == [0, 1]
    assert order.next_indices(2) == [2, 3]
    assert order.next_indices(2) == [0, 1]  # index 4 skipped, new epoch
    assert order.epoch == 1
    with pytest.raises(ConfigError, match="drop_last"):
        order.next_indices(6)


def test_resume_from_state_dict_continues_identically() -> None:
    reference = DataOrder(7, seed=11)
    full = [reference.next_indices(3) for _ in range(8)]

    first = DataOrder(7, seed=11)
    got = [first.next_indices(3) for _ in range(3)]
    state = json.loads(json.dumps(first.state_dict()))  # must survive a JSON checkpoint
    resumed = DataOrder(7, seed=11)
    resumed.load_state_dict(state)
    got += [resumed.next_indices(3) for _ in range(5)]
    assert got == full


def test_resume_refuses_a_different_dataset_or_seed() -> None:
    state = DataOrder(7, seed=11).state_dict()
    with pytest.raises(ConfigError, match="num_items=7"):
        DataOrder(8, seed=11).load_state_dict(state)
    with pytest.raises(ConfigError, match="seed=11"):
        DataOrder(7, seed=12).load_state_dict(state)


def test_order_is_identical_in_another_process() -> None:
    code = (
        "import json; from verifiers.data.order import DataOrder; o = DataOrder(100, seed=5); "
        "print(json.dumps([o.next_indices(30) for _ in range(5)]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    here = DataOrder(100, seed=5)
    assert json.loads(out.stdout) == [here.next_indices(30) for _ in range(5)]


def test_bad_arguments() -> None:
    with pytest.raises(ConfigError, match="empty"):
        DataOrder(0)
    with pytest.raises(ConfigError, match="positive count"):
        DataOrder(3).next_indices(0)
