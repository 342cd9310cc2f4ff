"""Left/right padding, position ids from the mask, per-token values aligned with ids."""

from __future__ import annotations

import pytest
import torch

from verifiers.data import left_pad, pad_2d, position_ids_from_mask, right_pad, truncate
from verifiers.errors import ConfigError


def test_left_pad_aligns_the_last_tokens() -> None:
    ids, mask = left_pad([[5, 6, 7], [8]], pad_id=0)
    assert ids.dtype == torch.long and mask.dtype == torch.long
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]


def test_right_pad_aligns_the_first_tokens() -> None:
    ids, mask = right_pad([[5, 6, 7], [8]], pad_id=-1)
    assert ids.tolist() == [[5, 6, 7], [8, -1, -1]]
    assert mask.tolist() == [[1, 1, 1], [1, 0, 0]]


def test_fixed_length_and_too_long_rows() -> None:
    ids, mask = left_pad([[1, 2]], pad_id=0, length=4)
    assert ids.tolist() == [[0, 0, 1, 2]] and mask.tolist() == [[0, 0, 1, 1]]
    with pytest.raises(ConfigError, match="longest row has 3"):
        left_pad([[1, 2, 3]], pad_id=0, length=2)


def test_empty_rows_are_all_padding() -> None:
    ids, mask = left_pad([[], [4]], pad_id=9)
    assert ids.tolist() == [[9], [4]] and mask.tolist() == [[0], [1]]


def test_position_ids_from_mask_left_padded() -> None:
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    assert position_ids_from_mask(mask).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]]


def test_position_ids_are_clipped_cumsum_for_any_mask() -> None:
    mask = torch.tensor([[1, 1, 0, 0], [0, 0, 0, 0]], dtype=torch.bool)
    expected = torch.clip(torch.cumsum(mask.long(), dim=-1) - 1, min=0)
    got = position_ids_from_mask(mask)
    assert torch.equal(got, expected)
    assert got.tolist() == [[0, 1, 1, 1], [0, 0, 0, 0]]


def test_pad_2d_matches_id_padding() -> None:
    seqs = [[11, 12, 13], [14]]
    loss_mask = [[0.0, 1.0, 1.0], [1.0]]
    ids, attn = right_pad(seqs, pad_id=0)
    lm = pad_2d(loss_mask, 0.0, "right")
    assert lm.dtype == torch.float32 and lm.shape == ids.shape
    assert lm.tolist() == [[0.0, 1.0, 1.0], [1.0, 0.0, 0.0]]
    assert torch.all(lm[attn == 0] == 0)
    left = pad_2d([[-0.5], [-0.1, -0.2]], 0.0, "left", dtype=torch.float64)
    assert left.dtype == torch.float64
    assert left.tolist() == [[0.0, -0.5], [-0.1, -0.2]]
    with pytest.raises(ConfigError, match="'left' or 'right'"):
        pad_2d([[1.0]], 0.0, "middle")  # type: ignore[arg-type]


def test_truncate_then_left_pad_pipeline() -> None:
    prompts = [list(range(1, 11)), [1, 2]]
    ids, mask = left_pad([truncate(p, 4, "left") for p in prompts], pad_id=0)
    assert ids.tolist() == [[7, 8, 9, 10], [0, 0, 1, 2]]
    assert position_ids_from_mask(mask).tolist() == [[0, 1, 2, 3], [0, 0, 0, 1]]
