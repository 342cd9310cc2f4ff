"""The packed wire format of experience columns: one flat tensor plus lengths, exact both ways."""

from __future__ import annotations

import pytest
import torch

from trainers.grpo.data.batch import row_from_result
from trainers.grpo.ray.wire import PackedResults, PackedRows, decode_column, encode_column
from verifiers.errors import ConfigError
from verifiers.types import RolloutError, RolloutResult, TurnTokens


def rollout(i: int, turns: list[tuple[list[int], list[int]]]) -> RolloutResult:
    return RolloutResult(
        example_id=i, group_id=7, rollout_index=i, prompt=[{"role": "user", "content": f"q{i}"}],
        completion=[{"role": "assistant", "content": f"a{i}"}], reward=0.25 * i, metrics={"f": float(i)},
        error=RolloutError(type="ToolError", message="x") if i == 2 else None,
        tokens=[TurnTokens(prompt_ids=p, completion_ids=c, completion_logprobs=[-0.1 * (k + 1) / 3 for k in range(len(c))],
                           finish_reason="stop") for p, c in turns],
    )


def test_variable_length_rows_travel_as_one_flat_tensor_and_come_back_equal() -> None:
    rows = [[5, 1, 9], [], [2] * 11, [4]]
    wire = encode_column(rows)
    assert isinstance(wire, PackedRows)
    assert wire.flat.dim() == 1 and wire.flat.numel() == 15  # no padding: 3 + 0 + 11 + 1 values
    assert wire.lengths.tolist() == [3, 0, 11, 1]
    assert decode_column(wire) == rows
    tensors = [torch.randn(n) for n in (2, 5, 1)]
    back = decode_column(encode_column(tensors))
    for a, b in zip(tensors, back, strict=True):
        assert torch.equal(a, b)


def test_rollouts_keep_their_token_data_exactly() -> None:
    """Multi-turn, differently long rollouts: every turn's ids and logprobs and all other fields survive,
    so the training row built from a decoded rollout equals the one built from the original."""
    results = [
        rollout(0, [([1, 2, 3], [4, 5])]),
        rollout(1, [([1, 2], [6]), ([1, 2, 6, 8, 9], [10, 11, 12])]),  # env tokens 8, 9 between turns
        rollout(2, []),  # failed before the model answered: no tokens
    ]
    wire = encode_column(results)
    assert isinstance(wire, PackedResults)
    assert wire.completion_ids.flat.numel() == 2 + 1 + 3  # all turns, unpadded
    assert wire.turns.tolist() == [1, 2, 0]
    back = decode_column(wire)
    assert [r.model_dump() for r in back] == [r.model_dump() for r in results]
    for a, b in zip(results, back, strict=True):
        assert row_from_result(a, 0, 64, "truncate") == row_from_result(b, 0, 64, "truncate")


def test_plain_values_stay_plain_and_bad_lengths_are_refused() -> None:
    for values in ([0.5, 1.0], ["a", "b"], [[1, "x"]], [True, False]):
        assert encode_column(values) == list(values)
    bad = PackedRows(torch.arange(4), torch.tensor([1, 2]), as_list=True)
    with pytest.raises(ConfigError, match="do not add up"):
        bad.rows()
