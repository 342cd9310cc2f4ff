"""ExperienceStore: TransferDock semantics, policies (filter, capacity, staleness) and helpers."""

from __future__ import annotations

import pickle
import queue
import threading

import pytest
import torch

from trainers.grpo.algo.advantages import ADVANTAGES
from trainers.grpo.data.store import ExperienceStore, pack, pad_rows, unpack
from verifiers.errors import ConfigError


def _put(store: ExperienceStore, gid, rewards, version: int = 0, **extra):
    cols = {"tokens": [[gid, i] for i in range(len(rewards))], "reward": list(rewards), **extra}
    return store.put(gid, cols, policy_version=version)


def _fill(store: ExperienceStore, n: int, size: int = 2, version: int = 0) -> None:
    for gid in range(n):
        _put(store, gid, [float(i) for i in range(size)], version)


# ----------------------------------------------------------------------------- handing out
def test_get_hands_out_whole_groups_with_their_rows_aligned() -> None:
    store = ExperienceStore()
    _put(store, "a", [0.0, 1.0, 1.0])
    _put(store, "b", [2.0, 0.0, 0.0])
    _put(store, "c", [1.0, 0.0, 0.0])
    batch = store.get("trainer", ["tokens", "reward"], num_groups=2)
    assert batch is not None
    assert batch.group_ids == ["a", "b"]  # oldest first
    assert batch.group_index == [0, 0, 0, 1, 1, 1] and len(batch) == 6 and batch.num_groups == 2
    assert batch.columns["tokens"] == [["a", 0], ["a", 1], ["a", 2], ["b", 0], ["b", 1], ["b", 2]]
    assert batch.policy_versions == [0] * 6
    # the batch plugs straight into the advantage functions
    adv = ADVANTAGES["grpo"](torch.tensor(batch.columns["reward"]), batch.group_index_tensor(), scale="none")
    torch.testing.assert_close(adv[:3], torch.tensor([-2 / 3, 1 / 3, 1 / 3]))


def test_shortage_returns_nothing_and_consumes_nothing_unless_partial_is_asked() -> None:
    store = ExperienceStore()
    _fill(store, 3)
    assert store.get("trainer", ["reward"], num_groups=4) is None
    partial = store.get("trainer", ["reward"], num_groups=4, allow_partial=True)
    assert partial is not None and partial.group_ids == [0, 1, 2]
    assert store.get("trainer", ["reward"], num_groups=1, allow_partial=True) is None  # nothing left at all
    store2 = ExperienceStore()
    _fill(store2, 3)
    assert store2.get("trainer", ["reward"], num_groups=4) is None
    got = store2.get("trainer", ["reward"], num_groups=3)
    assert got is not None and got.group_ids == [0, 1, 2]  # the refused request took nothing


def test_num_rows_requests_take_whole_groups_totalling_exactly() -> None:
    store = ExperienceStore()
    _put(store, "g3", [0.0, 1.0, 2.0])
    _put(store, "g4", [0.0, 1.0, 2.0, 3.0])
    _put(store, "g2", [0.0, 1.0])
    batch = store.get("trainer", ["reward"], num_rows=5)
    assert batch is not None and batch.group_ids == ["g3", "g2"] and len(batch) == 5
    assert store.get("trainer", ["reward"], num_rows=3) is None  # only the group of 4 is left


def test_columns_must_be_ready_in_every_row() -> None:
    store = ExperienceStore(consumers=("trainer",), columns=("tokens", "reward", "ref_logp"))
    store.put("g", {"tokens": [[1], [2]], "reward": [1.0, 0.0]}, policy_version=0)
    assert store.get("trainer", ["tokens", "ref_logp"], num_groups=1) is None
    store.put("g", {"ref_logp": [-0.5]}, rows=[1])
    assert store.num_available("trainer", ["tokens", "ref_logp"]) == 0  # row 0 still missing
    store.put("g", {"ref_logp": [-0.25]}, rows=[0])
    batch = store.get("trainer", ["tokens", "ref_logp"], num_groups=1)
    assert batch is not None and batch.columns["ref_logp"] == [-0.25, -0.5]


# ----------------------------------------------------------------------------- consumers
def test_consumers_read_independently_and_groups_are_released_after_all() -> None:
    store = ExperienceStore(consumers=("reference", "trainer"))
    _fill(store, 2)
    ref = store.get("reference", ["tokens"], num_groups=2)
    assert ref is not None and ref.group_ids == [0, 1]
    assert store.get("reference", ["tokens"], num_groups=1) is None  # never the same group twice
    assert store.all_consumed("reference") and not store.all_consumed("trainer")
    assert len(store) == 2  # the trainer has not taken them yet
    trainer = store.get("trainer", ["tokens", "reward"], num_groups=2)
    assert trainer is not None and trainer.group_ids == [0, 1]
    assert len(store) == 0 and store.stats()["released"] == 2
    assert store.put(0, {"reward": [1.0, 2.0]}) == "retired"  # a late write to a released group


def test_replicas_of_one_consumer_never_share_a_group() -> None:
    store = ExperienceStore()
    _fill(store, 60)
    taken: list[list[int]] = [[] for _ in range(4)]

    def replica(k: int) -> None:
        while (batch := store.get("trainer", ["reward"], num_groups=3)) is not None:
            taken[k].extend(batch.group_ids)

    threads = [threading.Thread(target=replica, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    everything = [g for part in taken for g in part]
    assert sorted(everything) == list(range(60))  # each group exactly once


def test_get_waits_up_to_its_timeout_for_a_producer() -> None:
    store = ExperienceStore()
    _fill(store, 1)
    producer = threading.Timer(0.05, lambda: _put(store, "late", [0.0, 1.0]))
    producer.start()
    batch = store.get("trainer", ["reward"], num_groups=2, timeout=10.0)
    producer.join()
    assert batch is not None and batch.group_ids == [0, "late"]
    assert store.get("trainer", ["reward"], num_groups=1, timeout=0.01) is None


# ----------------------------------------------------------------------------- policies
def test_zero_variance_groups_are_filtered_and_counted() -> None:
    store = ExperienceStore(filter_zero_std=True)
    assert _put(store, "flat", [1.0, 1.0, 1.0]) == "filtered"
    assert _put(store, "single", [0.5]) == "filtered"
    assert (
        store.put("tensor", {"reward": [torch.tensor(0.0), torch.tensor(0.0)]}, policy_version=0)
        == "filtered"
    )
    assert _put(store, "useful", [0.0, 1.0, 1.0]) == "stored"
    assert store.stats()["filtered_zero_std"] == 3
    assert store.num_available("trainer", ["reward"]) == 1
    assert store.get("trainer", ["reward"], num_groups=2) is None  # the generator must refill
    _put(store, "refill", [0.0, 0.3, 1.0])
    batch = store.get("trainer", ["reward"], num_groups=2)
    assert batch is not None and batch.group_ids == ["useful", "refill"]
    # the filter waits until the reward column is complete
    store.put("late", {"tokens": [[1], [2]]}, policy_version=0)
    assert store.put("late", {"reward": [1.0]}, rows=[0]) == "stored"
    assert store.put("late", {"reward": [1.0]}, rows=[1]) == "filtered"


def test_stale_groups_are_evicted_and_refused() -> None:
    store = ExperienceStore(max_staleness=1)
    _put(store, "v0", [0.0, 1.0], version=0)
    _put(store, "v1", [0.0, 1.0], version=1)
    assert store.set_policy_version(1) == 0
    assert store.set_policy_version(2) == 1  # v0 is now 2 versions behind
    assert store.stats()["evicted_stale"] == 1
    assert _put(store, "old", [0.0, 1.0], version=0) == "stale"
    assert store.stats()["rejected_stale"] == 1
    batch = store.get("trainer", ["reward"], num_groups=1)
    assert batch is not None and batch.group_ids == ["v1"] and batch.policy_versions == [1, 1]
    with pytest.raises(ConfigError, match="only grow"):
        store.set_policy_version(1)


def test_capacity_raises_when_full_and_waits_with_a_timeout() -> None:
    store = ExperienceStore(max_groups=2)
    _fill(store, 2)
    with pytest.raises(queue.Full, match="max_groups"):
        _put(store, "extra", [0.0, 1.0])
    store.put(0, {"reward": [5.0, 6.0]})  # writing to an existing group is always allowed
    consumer = threading.Timer(0.05, lambda: store.get("trainer", ["reward"], num_groups=1))
    consumer.start()
    status = store.put("extra", {"reward": [0.0, 1.0]}, policy_version=0, timeout=10.0)
    consumer.join()
    assert status == "stored" and len(store) == 2
    with pytest.raises(ConfigError, match="at most 2"):
        store.get("trainer", ["reward"], num_groups=3)


def test_seeded_random_picking_is_reproducible() -> None:
    def order(seed: int) -> list[int]:
        store = ExperienceStore(pick="random", seed=seed)
        _fill(store, 30)
        out: list[int] = []
        while (batch := store.get("trainer", ["reward"], num_groups=5)) is not None:
            out.extend(batch.group_ids)
        return out

    first, again, other = order(7), order(7), order(8)
    assert first == again and sorted(first) == list(range(30))
    assert first != other and first != list(range(30))


def test_state_dict_round_trip_continues_identically() -> None:
    store = ExperienceStore(consumers=("reference", "trainer"), pick="random", seed=3, max_staleness=5)
    _fill(store, 12)
    store.set_policy_version(2)
    store.get("trainer", ["reward"], num_groups=4)
    store.get("reference", ["tokens"], num_groups=2)
    state = pickle.loads(pickle.dumps(store.state_dict()))
    restored = ExperienceStore(consumers=("reference", "trainer"), pick="random", seed=999, max_staleness=5)
    restored.load_state_dict(state)
    assert restored.stats() == store.stats()
    for s in (store, restored):
        _put(s, "new", [0.0, 1.0], version=2)
    for consumer, cols in (("trainer", ["reward", "tokens"]), ("reference", ["tokens"])):
        a = store.get(consumer, cols, num_groups=3)
        b = restored.get(consumer, cols, num_groups=3)
        assert a is not None and b is not None
        assert (a.group_ids, a.columns) == (b.group_ids, b.columns)
    with pytest.raises(ConfigError, match="not declared"):
        ExperienceStore(consumers=("trainer",)).load_state_dict(state)


def test_clear_empties_the_store() -> None:
    store = ExperienceStore()
    _fill(store, 3)
    store.clear()
    assert len(store) == 0 and store.all_consumed("trainer")
    assert store.get("trainer", ["reward"], num_groups=1) is None


def test_requests_that_can_never_succeed_are_errors() -> None:
    store = ExperienceStore(columns=("tokens", "reward"))
    with pytest.raises(ConfigError, match="unknown consumer"):
        store.get("critic", ["reward"], num_groups=1)
    with pytest.raises(ConfigError, match="unknown column"):
        store.get("trainer", ["advantage"], num_groups=1)
    with pytest.raises(ConfigError, match="exactly one"):
        store.get("trainer", ["reward"], num_groups=1, num_rows=2)
    with pytest.raises(ConfigError, match="policy_version"):
        store.put("g", {"reward": [1.0]})
    with pytest.raises(ConfigError, match="unknown column"):
        store.put("g", {"logits": [1.0]}, policy_version=0)


# ----------------------------------------------------------------------------- helpers
def test_pad_rows_left_and_right() -> None:
    rows = [torch.tensor([1, 2, 3]), torch.tensor([4])]
    right, mask = pad_rows(rows, pad_value=0)
    assert right.tolist() == [[1, 2, 3], [4, 0, 0]] and mask.tolist() == [[1, 1, 1], [1, 0, 0]]
    left, lmask = pad_rows([[1, 2, 3], [4]], pad_value=-1, side="left", dtype=torch.long)
    assert left.tolist() == [[1, 2, 3], [-1, -1, 4]] and lmask.tolist() == [[1, 1, 1], [0, 0, 1]]
    wide, _ = pad_rows([torch.ones(2, 3), torch.ones(1, 3)])
    assert wide.shape == (2, 2, 3)


def test_pack_and_unpack_round_trip() -> None:
    rows = [torch.tensor([1.0, 2.0]), torch.tensor([]), torch.tensor([3.0, 4.0, 5.0])]
    flat, lengths = pack(rows)
    assert flat.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0] and lengths.tolist() == [2, 0, 3]
    back = unpack(flat, lengths)
    assert [r.tolist() for r in back] == [r.tolist() for r in rows]
    with pytest.raises(ConfigError, match="add up"):
        unpack(flat, [2, 2])
