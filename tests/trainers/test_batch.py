"""Rollouts → training rows → padded batches, on real multi-turn rollouts from the embedded server.

The server's token ids are the ground truth: a row must be exactly the last turn's prompt ids
plus its completion ids, with the loss on sampled tokens only (environment text between turns
is context), and the sampler's logprob of token ``t + 1`` in target column ``t``.
"""

from __future__ import annotations

import string
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import verifiers as vf
from trainers.grpo.data.batch import TrainRow, collate, expert_rows, row_from_result, rows_from_result
from verifiers.types import RolloutResult, TurnTokens

pytest.importorskip("transformers")
pytest.importorskip("uvicorn")

SAMPLING = {"max_tokens": 8, "temperature": 1.0, "logprobs": True, "extra_body": {"return_token_ids": True}}


class AskAgain(vf.MultiTurnEnv):
    """Two model turns with an environment message ("again") in between."""

    async def env_response(self, messages: Any, state: Any, **kwargs: Any) -> Any:
        return [{"role": "user", "content": "again"}]


@pytest.fixture(scope="module")
def served(base_model_dir: Path) -> Iterator[Any]:
    from verifiers.inference.engine import InferenceEngine
    from verifiers.inference.server.runner import EmbeddedServer

    with InferenceEngine.from_pretrained(base_model_dir) as engine, EmbeddedServer(engine, ["tiny"]) as server:
        yield server


@pytest.fixture
async def client(served: Any) -> AsyncIterator[Any]:
    c = vf.make_client(served.base_url, max_retries=0)
    yield c
    await c.close()


async def rollouts(client: Any, sampling: dict[str, Any], n: int = 6) -> list[RolloutResult]:
    env = AskAgain(dataset=[{"question": "Say a", "answer": "a"}], max_turns=2)
    out = await env.a_evaluate(client, "tiny", sampling_args=sampling, num_examples=1, rollouts_per_example=n)
    return list(out.results)


@pytest.fixture
async def two_turns(client: Any, served: Any) -> RolloutResult:
    """A real two-turn rollout whose second prompt extends the first turn token for token.

    A random model rarely ends a turn by itself (a turn cut at ``max_tokens`` ends the
    episode), so lowercase letters and digits are made stop tokens: turns end after a few
    tokens with the stop token kept in the text. A random model also sometimes samples a
    special token that the chat template cannot re-render; such rollouts are not
    prefix-consistent and are skipped here (tested below).
    """
    tok = served.engine.tokenizer
    stops = tok.convert_tokens_to_ids(list(string.ascii_lowercase + string.digits))
    sampling = {**SAMPLING, "extra_body": {**SAMPLING["extra_body"], "stop_token_ids": stops}}
    for r in await rollouts(client, sampling, n=8):
        if r.error is None and len(r.tokens) == 2 and r.token_sequence().prefix_consistent:
            return r
    pytest.fail("no prefix-consistent two-turn rollout among 8")


def trained_flags(r: RolloutResult) -> tuple[list[int], list[int]]:
    """Token ids of the whole rollout and 1 where the model sampled the token, 0 elsewhere."""
    first, second = r.tokens
    ids = [*second.prompt_ids, *second.completion_ids]
    start1 = len(first.prompt_ids)
    end1 = start1 + len(first.completion_ids)
    flags = [0] * len(ids)
    for p in [*range(start1, end1), *range(len(second.prompt_ids), len(ids))]:
        flags[p] = 1
    return ids, flags


async def test_multi_turn_row_trains_on_sampled_tokens_only(two_turns: RolloutResult, served: Any) -> None:
    r = two_turns
    ids, flags = trained_flags(r)
    row = row_from_result(r, group=5, max_seq_len=4096, overlong="truncate")
    assert row is not None
    assert row.input_ids == ids  # the server's ids, not a re-tokenisation
    assert len(row.loss_mask) == len(row.sampler_logp) == len(ids) - 1
    assert row.loss_mask == flags[1:]  # target t is token t + 1
    assert row.completion_len == sum(flags)
    assert (row.reward, row.group, row.is_truncated) == (r.reward, 5, r.is_truncated)

    tok = served.engine.tokenizer
    env_text = tok.decode([t for t, f in zip(ids, flags, strict=True) if not f][len(r.tokens[0].prompt_ids):])
    assert "again" in env_text  # the environment's message is in the sequence, masked out

    # sampler logprobs sit in the column of the token they belong to ...
    sampled = [lp for turn in r.tokens for lp in turn.completion_logprobs]
    assert [lp for lp, m in zip(row.sampler_logp, row.loss_mask, strict=True) if m] == sampled
    assert all(lp == 0.0 for lp, m in zip(row.sampler_logp, row.loss_mask, strict=True) if not m)
    # ... which is where the model's own log-probability of that token is
    model = served.engine.model
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, :-1].float()
    mine = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[1:]).unsqueeze(-1)).squeeze(-1)
    trained = torch.tensor(row.loss_mask, dtype=torch.bool)
    torch.testing.assert_close(torch.tensor(row.sampler_logp)[trained], mine[trained], atol=1e-4, rtol=0)


async def test_overlong_rows_are_truncated_or_dropped(two_turns: RolloutResult) -> None:
    ids, flags = trained_flags(two_turns)
    full = row_from_result(two_turns, 0, max_seq_len=len(ids), overlong="drop")
    assert full is not None and full.input_ids == ids  # exactly fits: kept whole

    cut = row_from_result(two_turns, 0, max_seq_len=len(ids) - 1, overlong="truncate")
    assert cut is not None
    assert cut.input_ids == ids[:-1]
    assert cut.loss_mask == flags[1:-1]
    assert cut.is_truncated and cut.completion_len == sum(flags) - 1

    assert row_from_result(two_turns, 0, max_seq_len=len(ids) - 1, overlong="drop") is None
    prompt_len = len(two_turns.tokens[0].prompt_ids)
    # nothing of the completion would fit: no row even when truncating
    assert row_from_result(two_turns, 0, max_seq_len=prompt_len, overlong="truncate") is None


async def test_rollouts_without_token_data_are_dropped(client: Any) -> None:
    plain = {k: v for k, v in SAMPLING.items() if k != "extra_body"}  # no return_token_ids
    results = await rollouts(client, plain, n=1)
    assert results[0].tokens == []
    assert row_from_result(results[0], 0, 4096, "truncate") is None


def test_inconsistent_prefix_is_two_rows() -> None:
    """A later prompt that does not extend the earlier turn (re-tokenised history) is not one
    sequence: it becomes a second row of the rollout (`rows_from_result`), not a dropped rollout;
    the single-row view (`row_from_result`) has no one row to give."""
    r = RolloutResult(
        example_id=0, prompt=[], completion=[],
        tokens=[
            TurnTokens(prompt_ids=[1, 2, 3], completion_ids=[4, 5], completion_logprobs=[-1.0, -1.0]),
            TurnTokens(prompt_ids=[1, 2, 3, 9, 5, 7], completion_ids=[8], completion_logprobs=[-1.0]),
        ],
    )
    assert row_from_result(r, 0, 4096, "truncate") is None
    rows = rows_from_result(r, 0, 4096, "truncate", rollout=3)
    assert [row.input_ids for row in rows] == [[1, 2, 3, 4, 5], [1, 2, 3, 9, 5, 7, 8]]
    assert [row.loss_mask for row in rows] == [[0, 0, 1, 1], [0, 0, 0, 0, 0, 1]]
    assert [row.rollout for row in rows] == [3, 3]


def _row(n_prompt: int, n_comp: int, *, group: int, reward: float) -> TrainRow:
    ids = list(range(10, 10 + n_prompt + n_comp))
    mask = [0] * (n_prompt - 1) + [1] * n_comp
    lps = [0.0] * (n_prompt - 1) + [-0.5] * n_comp
    return TrainRow(ids, mask, lps, reward, group, False, n_comp, prompt_len=n_prompt)


def test_collate_pads_right_and_numbers_positions() -> None:
    rows = [_row(3, 2, group=0, reward=1.0), _row(4, 4, group=1, reward=0.0), _row(2, 1, group=1, reward=0.5)]
    b = collate(rows, pad_id=0)
    assert b.input_ids.shape == (3, 8) and b.loss_mask.shape == b.sampler_logp.shape == (3, 7)
    for i, r in enumerate(rows):
        n = len(r.input_ids)
        assert b.input_ids[i, :n].tolist() == r.input_ids
        assert b.input_ids[i, n:].eq(0).all()
        assert b.attention_mask[i].tolist() == [1] * n + [0] * (8 - n)
        assert b.position_ids[i, :n].tolist() == list(range(n))
        assert b.loss_mask[i].tolist() == [bool(m) for m in r.loss_mask] + [False] * (8 - n)
        assert b.sampler_logp[i].tolist() == r.sampler_logp + [0.0] * (8 - n)
    assert b.rewards.tolist() == [1.0, 0.0, 0.5]
    assert b.group_ids.tolist() == [0, 1, 1]
    assert not b.is_expert.any() and not b.is_truncated.any()

    sub = b.select(torch.tensor([2, 0]))  # micro-batches drop the padding nobody needs
    assert sub.input_ids.shape == (2, 5) and sub.loss_mask.shape == (2, 4)
    assert sub.input_ids[1].tolist() == rows[0].input_ids
    assert sub.rewards.tolist() == [0.5, 1.0]


def test_expert_rows_train_on_assistant_turns_only(base_model_dir: Path) -> None:
    from verifiers.inference.engine.loading import load_model_and_tokenizer

    _, tok = load_model_and_tokenizer(base_model_dir, with_tokenizer=True)
    convs = [
        [{"role": "user", "content": "Say a"}, {"role": "assistant", "content": "aaa"},
         {"role": "user", "content": "Say b"}, {"role": "assistant", "content": "bb"}],
        [{"role": "user", "content": "no answer here"}],  # nothing to learn: dropped
    ]
    rows = expert_rows(tok, convs, max_seq_len=4096)
    assert len(rows) == 1
    row = rows[0]
    assert row.is_expert and row.reward == 0.0
    trained = tok.decode([t for t, m in zip(row.input_ids[1:], row.loss_mask, strict=True) if m])
    context = tok.decode([t for t, m in zip(row.input_ids[1:], row.loss_mask, strict=True) if not m])
    assert "aaa" in trained and "bb" in trained and trained.index("aaa") < trained.index("bb")
    assert "Say" not in trained and "Say a" in context and "Say b" in context
