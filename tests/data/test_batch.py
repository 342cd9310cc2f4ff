"""DataBatch: tensors and per-row objects always reordered together."""

from __future__ import annotations

import pytest
import torch

from verifiers.data import DataBatch
from verifiers.errors import ConfigError


def make_batch() -> DataBatch:
    return DataBatch(
        tensors={
            "input_ids": torch.tensor([[1, 1], [2, 2], [3, 3]]),
            "reward": torch.tensor([0.1, 0.2, 0.3]),
        },
        objects={"answer": ["a", "b", "c"]},
    )


def rows_agree(batch: DataBatch) -> None:
    """Every row's tensor values still belong to its objects (row k of the original: id k+1, answer 'abc'[k])."""
    for ids, reward, answer in zip(
        batch["input_ids"].tolist(), batch["reward"].tolist(), batch["answer"], strict=True
    ):
        k = "abc".index(answer)
        assert ids == [k + 1, k + 1] and reward == pytest.approx(0.1 * (k + 1))


def test_uids_are_added_unique_and_kept_when_given() -> None:
    b = make_batch()
    assert len(b) == 3 and len(set(b.uid)) == 3
    assert all(len(u) == 32 and int(u, 16) >= 0 for u in b.uid)
    given = DataBatch(objects={"answer": ["x", "y"]}, uid=["p", "q"])
    assert given.uid == ["p", "q"]


def test_mismatched_column_sizes_are_rejected() -> None:
    with pytest.raises(ConfigError, match="same number of rows"):
        DataBatch(tensors={"x": torch.zeros(3, 2)}, objects={"y": [1, 2]})


def test_repeat_interleaved_and_tiled() -> None:
    b = make_batch()
    inter = b.repeat(2, interleave=True)
    assert inter["answer"] == ["a", "a", "b", "b", "c", "c"]
    assert inter["input_ids"][:, 0].tolist() == [1, 1, 2, 2, 3, 3]
    assert inter.uid == [u for u in b.uid for _ in range(2)]  # samples of one prompt share its uid
    tiled = b.repeat(2, interleave=False)
    assert tiled["answer"] == ["a", "b", "c", "a", "b", "c"]
    assert tiled.uid == b.uid * 2
    rows_agree(inter)
    rows_agree(tiled)


def test_select_and_original_untouched() -> None:
    b = make_batch()
    s = b.select([2, 0])
    assert s["answer"] == ["c", "a"] and s.uid == [b.uid[2], b.uid[0]]
    rows_agree(s)
    assert b["answer"] == ["a", "b", "c"]
    with pytest.raises(ConfigError, match="out of range"):
        b.select([3])


def test_shuffle_uses_one_permutation_for_everything_and_is_seeded() -> None:
    b = make_batch().repeat(4)
    s1 = b.shuffle(torch.Generator().manual_seed(0))
    s2 = b.shuffle(0)
    assert s1["answer"] == s2["answer"] and s1.uid == s2.uid
    assert sorted(s1["answer"]) == sorted(b["answer"])
    rows_agree(s1)
    uid_of = dict(zip(b.uid, b["answer"], strict=True))
    assert all(uid_of[u] == a for u, a in zip(s1.uid, s1["answer"], strict=True))


def test_split_into_equal_chunks_and_concat_back() -> None:
    b = make_batch().repeat(2)
    parts = b.split(3)
    assert [len(p) for p in parts] == [2, 2, 2]
    assert [p["answer"] for p in parts] == [["a", "a"], ["b", "b"], ["c", "c"]]
    back = DataBatch.concat(parts)
    assert back["answer"] == b["answer"] and back.uid == b.uid
    assert torch.equal(back["input_ids"], b["input_ids"])
    with pytest.raises(ConfigError, match="6 rows into 4 equal chunks"):
        b.split(4)


def test_union_adds_columns_and_checks_sizes_and_conflicts() -> None:
    b = make_batch()
    extra = DataBatch(tensors={"logprobs": torch.zeros(3, 2)}, objects={"task": ["t"] * 3}, add_uid=False)
    u = b.union(extra)
    assert set(u.keys()) == {"input_ids", "reward", "answer", "uid", "logprobs", "task"}
    assert u.uid == b.uid
    rows_agree(u.shuffle(1))
    with pytest.raises(ConfigError, match="different sizes"):
        b.union(DataBatch(objects={"task": ["t"] * 2}, add_uid=False))
    with pytest.raises(ConfigError, match="'answer' is in both"):
        b.union(DataBatch(objects={"answer": ["a", "b", "X"]}, add_uid=False))
    same = b.union(DataBatch(objects={"answer": ["a", "b", "c"]}, uid=b.uid))
    assert same["answer"] == ["a", "b", "c"]
    # a batch about other prompts (its own uids) cannot be merged silently
    with pytest.raises(ConfigError, match="'uid' is in both"):
        b.union(DataBatch(objects={"task": ["t"] * 3}))
