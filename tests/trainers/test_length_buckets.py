"""Completions of different lengths run in length buckets on their shared prompts' cache.

One step's completions can be 20 tokens beside 900; in one pass every row is padded to the
longest. `length_buckets` groups rows of similar length (longest first, each group padded to
its own longest row) and the shared-prompt path runs one completion pass per group on a copy
of the prompts' cache. These tests hold it to the same function as the full-logits path, and
the grouping to its promises: every row once, padding within the slack, one group when
splitting would save little.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
import torch

from trainers.grpo.learn import plain_forward
from trainers.grpo.learn.logprobs import completion_logps, full_logits_logps, length_buckets

from .test_logprobs_memory import assert_same, make_batch, step, tiny


@pytest.fixture(autouse=True)
def _one_thread() -> Any:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def padded(groups: list[list[int]], lengths: list[int]) -> int:
    return sum(len(g) * max(lengths[r] for r in g) for g in groups)


def test_equal_lengths_are_one_group_in_order() -> None:
    assert length_buckets([16] * 64) == [list(range(64))]


def test_a_spread_of_lengths_is_grouped_longest_first_within_the_slack() -> None:
    lengths = [int(x) for x in torch.randint(1, 400, (200,), generator=torch.Generator().manual_seed(0))]
    groups = length_buckets(lengths, slack=0.25, max_buckets=64)
    assert sorted(r for g in groups for r in g) == list(range(200))
    assert len(groups) > 1
    widths = [max(lengths[r] for r in g) for g in groups]
    assert widths == sorted(widths, reverse=True)
    for g in groups:
        assert len(g) * max(lengths[r] for r in g) <= 1.25 * sum(lengths[r] for r in g) + 1e-9
    assert padded(groups, lengths) < 0.75 * len(lengths) * max(lengths)


def test_the_number_of_groups_is_capped_by_widening_the_slack() -> None:
    lengths = list(range(1, 1001))
    groups = length_buckets(lengths, max_buckets=3)
    assert 1 < len(groups) <= 3
    assert sorted(r for g in groups for r in g) == list(range(1000))


def test_splitting_that_saves_little_is_not_done() -> None:
    # one long row among equal ones: groups would save under a quarter of the padding
    assert length_buckets([10, 10, 10, 10, 9]) == [[0, 1, 2, 3, 4]]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_bucketed_completions_give_the_full_logits_function(temperature: float, monkeypatch: Any) -> None:
    model = tiny()
    batch = make_batch(model.config.vocab_size, groups=4, group_size=6, completion=(1, 40), seed=3)
    lengths = (batch.attention_mask.sum(1) - batch.prompt_lens).tolist()
    assert len(length_buckets(lengths)) > 1  # the batch really takes the bucketed path
    passes = []
    decoder = model.get_decoder()
    decoder.register_forward_hook(lambda _m, _a, out: passes.append(out[0].shape if isinstance(out, tuple)
                                                                     else out.last_hidden_state.shape))
    plain = plain_forward.forward  # a Llama on a CPU runs as plain ops, without the decoder module

    def counted(*a: Any, **k: Any) -> Any:
        out = plain(*a, **k)
        passes.append(out[0].shape)
        return out

    monkeypatch.setattr(plain_forward, "forward", counted)
    ref = step(model, batch, full_logits_logps, temperature)
    passes.clear()
    new = step(model, batch, functools.partial(completion_logps, chunk_tokens=7), temperature)
    assert len(passes) == 1 + len(length_buckets(lengths))  # the prompts once, then one pass per bucket
    assert_same(ref, new)
