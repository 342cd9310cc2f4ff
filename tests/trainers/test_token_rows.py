"""A rollout of several token rows trains as one rollout: one advantage, one sequence of the loss.

Agent programs give histories that are not one growing prefix (a compaction summary, reasoning
stripped from earlier turns, a sub-agent's own conversation); `rows_from_result` turns them into
several rows instead of dropping them. These tests hold the trainer to "the split changes
nothing but the rows": the group statistics are over rollouts, the sequence-mean loss weighs
the rollout once, micro-batching does not matter, and a real step trains on such a batch.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from trainers.grpo.algo.algorithms import compute_loss, get_algorithm
from trainers.grpo.algo.losses import LossNormalizer, rollout_token_counts
from trainers.grpo.data.assemble import BatchAssembler, no_rows_reason
from trainers.grpo.data.batch import collate, row_from_result, rows_from_result
from trainers.grpo.dist.ranks import Dist
from verifiers.types import RolloutResult, TurnTokens

F64 = torch.float64


def call(prompt: list[int], completion: list[int]) -> TurnTokens:
    return TurnTokens(prompt_ids=prompt, completion_ids=completion, completion_logprobs=[-0.5] * len(completion))


def rollout(reward: float, tokens: list[TurnTokens], truncated: bool = False) -> RolloutResult:
    return RolloutResult(example_id=0, prompt=[], completion=[], reward=reward, tokens=tokens, is_truncated=truncated)


def linear(reward: float, base: int) -> RolloutResult:
    """Two calls, one growing history: one row."""
    return rollout(reward, [call([base, base + 1], [base + 2, base + 3]),
                            call([base, base + 1, base + 2, base + 3, 9], [base + 4])])


def compacted(reward: float, base: int) -> RolloutResult:
    """Linear for two calls, then a summary prompt (a new row), then a sub-agent (another row)."""
    return rollout(reward, [
        call([base, base + 1], [base + 2]),
        call([base, base + 1, base + 2, 9], [base + 3, base + 4]),
        call([base, 70, 71], [base + 5]),  # compaction: system + summary
        call([80, 81], [base + 6, base + 7]),  # sub-agent
    ])


# -- rows from a rollout -------------------------------------------------------------------------
def test_a_non_prefix_history_gives_one_row_per_history_with_the_rollouts_reward() -> None:
    r = compacted(0.75, 10)
    rows = rows_from_result(r, group=3, max_seq_len=64, overlong="truncate", rollout=7)
    assert [row.input_ids for row in rows] == [[10, 11, 12, 9, 13, 14], [10, 70, 71, 15], [80, 81, 16, 17]]
    assert [row.loss_mask for row in rows] == [[0, 1, 0, 1, 1], [0, 0, 1], [0, 1, 1]]
    assert [row.sampler_logp for row in rows] == [[0.0, -0.5, 0.0, -0.5, -0.5], [0.0, 0.0, -0.5], [0.0, -0.5, -0.5]]
    assert {(row.reward, row.group, row.rollout) for row in rows} == {(0.75, 3, 7)}
    assert [row.completion_len for row in rows] == [3, 1, 2]
    assert [row.prompt_len for row in rows] == [2, 3, 2]
    assert row_from_result(r, 0, 64, "truncate") is None  # the single-row view has no one row to give
    assert row_from_result(linear(1.0, 10), 0, 64, "truncate") is not None


def test_overlong_applies_to_each_row() -> None:
    r = compacted(1.0, 10)  # rows of 6, 4 and 4 tokens
    assert [len(x.input_ids) for x in rows_from_result(r, 0, 5, "drop")] == [4, 4]
    cut = rows_from_result(r, 0, 5, "truncate")
    assert [x.input_ids for x in cut] == [[10, 11, 12, 9, 13], [10, 70, 71, 15], [80, 81, 16, 17]]
    assert [x.is_truncated for x in cut] == [True, False, False]
    # a rollout that ended at max_tokens: all its rows are marked (its reward says little about any)
    assert all(x.is_truncated for x in rows_from_result(compacted(1.0, 10).model_copy(update={"is_truncated": True}),
                                                        0, 64, "truncate"))


def test_no_rows_reason_no_longer_blames_non_prefix_histories() -> None:
    reason = no_rows_reason([compacted(1.0, 10)], step=0, max_seq_len=3)
    assert "longer than max_seq_len = 3" in reason and "token row" in reason
    assert "prefix" not in no_rows_reason([rollout(0.0, [call([1, 2], [])])], step=0, max_seq_len=64)


# -- advantages and metrics of the step's batch ----------------------------------------------------
def assembler(preset: str = "grpo") -> BatchAssembler:
    cfg = SimpleNamespace(max_seq_len=64, overlong="truncate", seed=0)
    return BatchAssembler(cfg, get_algorithm(preset), Dist(), pad_id=0, expert=[])


REWARDS = [[1.0, 0.0, 0.5, 0.0], [0.2, 0.9, 0.4]]


def groups(split: set[tuple[int, int]]) -> list[list[RolloutResult]]:
    """Two groups with REWARDS; rollout (g, i) in ``split`` has three rows, the others one."""
    return [[(compacted if (g, i) in split else linear)(rew, 10 + 10 * i) for i, rew in enumerate(rs)]
            for g, rs in enumerate(REWARDS)]


@pytest.mark.parametrize("preset", ["grpo", "dr_grpo", "dapo"])
def test_each_rollout_gets_the_advantage_it_gets_unsplit(preset: str) -> None:
    plain, plain_metrics = assembler(preset).build(groups(set()), 0, "cpu")
    batch, metrics = assembler(preset).build(groups({(0, 0), (1, 2)}), 0, "cpu")
    assert len(plain) == 7 and len(batch) == 11
    assert plain.advantages is not None and batch.advantages is not None
    assert batch.rollout_ids is not None
    per_rollout = {}
    for rid, adv in zip(batch.rollout_ids.tolist(), batch.advantages.tolist(), strict=True):
        assert per_rollout.setdefault(rid, adv) == adv  # every row of a rollout carries its advantage
    assert list(per_rollout.values()) == pytest.approx(plain.advantages.tolist(), abs=1e-6)
    assert batch.rollout_ids.tolist() == [0, 0, 0, 1, 2, 3, 4, 5, 6, 6, 6]
    for key in ("reward", "reward_std", "frac_reward_zero_std", "rollouts/trained"):
        assert metrics[key] == pytest.approx(plain_metrics[key])


def test_rows_per_rollout_and_prefix_breaks_metrics() -> None:
    _, plain = assembler().build(groups(set()), 0, "cpu")
    assert (plain["rollouts/rows_per_rollout"], plain["rollouts/prefix_breaks"], plain["rollouts/trained"]) == (1, 0, 7)
    _, split = assembler().build(groups({(0, 0), (1, 2)}), 0, "cpu")
    assert split["rollouts/trained"] == 7
    assert split["rollouts/rows_per_rollout"] == pytest.approx(11 / 7)
    assert split["rollouts/prefix_breaks"] == 4
    # lengths are per rollout: a split rollout's trained tokens together (3 + 1 + 2 = 6 of compacted, 3 of linear)
    assert split["completions/mean_length"] == pytest.approx((6 * 2 + 3 * 5) / 7)
    assert split["completions/max_length"] == 6


def test_token_in_share_counts_follow_up_calls_only() -> None:
    """`rollouts/token_in_share`: of the agent programs' follow-up calls, those that went token-in;
    absent when no call was a follow-up (an environment without a program, or without a tokenizer)."""
    _, plain = assembler().build(groups(set()), 0, "cpu")
    assert "rollouts/token_in_share" not in plain
    results = groups(set())
    for g, group in enumerate(results):
        for i, r in enumerate(group):
            first, second = r.tokens
            r.tokens = [first, second.model_copy(update={"follow_up": True, "token_in": (g, i) != (0, 1)})]
    _, metrics = assembler().build(results, 0, "cpu")
    assert metrics["rollouts/token_in_share"] == pytest.approx(6 / 7)


# -- the loss weighs a rollout once ----------------------------------------------------------------
# Rollout A has 6 trained tokens, B 3. Unsplit: one row each. Split: A's tokens in three rows.
UNSPLIT = [[0, 1, 2, 3, 4, 5], [6, 7, 8]]  # rows as token indices into one logp vector
SPLIT = [[0, 1], [2, 3, 4], [5], [6, 7, 8]]
SPLIT_ROLLOUTS = torch.tensor([0, 0, 0, 1])


def token_loss(layout: list[list[int]], aggregation: str, rollout_ids: torch.Tensor | None,
               parts: list[list[int]] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """compute_loss over ``layout``'s rows (micro-batches ``parts``), and its gradient wrt the 9 token logps."""
    gen = torch.Generator().manual_seed(0)
    v = torch.randn(9, generator=gen, dtype=F64).mul(0.3).sub(1.0).requires_grad_(True)
    old = (v.detach() + 0.25 * torch.randn(9, generator=gen, dtype=F64))  # ratios off 1, some clipped
    adv_of_token = torch.tensor([0.8] * 6 + [-1.3] * 3, dtype=F64)
    width = max(len(r) for r in layout)
    index = torch.tensor([r + [0] * (width - len(r)) for r in layout])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in layout], dtype=torch.bool)
    preset = get_algorithm("grpo", aggregation=aggregation)
    norm = LossNormalizer.from_batch(mask, max_completion_len=8, rollout_ids=rollout_ids)
    seq_tokens = None if rollout_ids is None else rollout_token_counts(mask, rollout_ids)
    total = torch.zeros((), dtype=F64)
    for part in parts or [list(range(len(layout)))]:
        p = torch.tensor(part)
        loss, _ = compute_loss(preset, logp=v[index[p]], old_logp=old[index[p]], advantages=adv_of_token[index[p, 0]],
                               loss_mask=mask[p], normalizer=norm,
                               sequence_tokens=None if seq_tokens is None else seq_tokens[p])
        total = total + loss
    (grad,) = torch.autograd.grad(total, v)
    return total.detach(), grad


@pytest.mark.parametrize("aggregation", ["grpo", "bnpo", "dr_grpo"])
def test_a_split_rollout_contributes_what_one_row_would(aggregation: str) -> None:
    one_loss, one_grad = token_loss(UNSPLIT, aggregation, torch.tensor([0, 1]))
    assert one_loss != 0
    for parts in (None, [[0, 3], [1], [2]], [[2, 1], [0, 3]]):  # any split into micro-batches
        loss, grad = token_loss(SPLIT, aggregation, SPLIT_ROLLOUTS, parts)
        torch.testing.assert_close(loss, one_loss, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(grad, one_grad, rtol=1e-12, atol=1e-12)
    # no rollout ids (each row its own sequence, the old behaviour): the grpo mean counts A three times
    loss, _ = token_loss(SPLIT, aggregation, None)
    if aggregation == "bnpo":  # token-level: a split does not multiply anything
        torch.testing.assert_close(loss, one_loss)
    else:
        assert abs(float(loss - one_loss)) > 1e-3


def test_normaliser_counts_rollouts_and_rollout_token_counts() -> None:
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0], [0, 0, 0], [1, 1, 0]], dtype=torch.bool)
    ids = torch.tensor([4, 4, 4, 9, 2])
    expert = torch.tensor([False, False, False, False, True])
    norm = LossNormalizer.from_batch(mask, is_expert=expert, rollout_ids=ids)
    assert (norm.num_sequences, norm.num_active_tokens, norm.num_expert_sequences) == (1, 6, 1)
    assert rollout_token_counts(mask, ids).tolist() == [6, 6, 6, 0, 2]
    with pytest.raises(Exception, match="rollout_ids must be"):
        LossNormalizer.from_batch(mask, rollout_ids=ids[:3])


def test_collate_keeps_rollout_ids_through_select() -> None:
    rows = [row for i, r in enumerate([compacted(1.0, 10), linear(0.0, 20)])
            for row in rows_from_result(r, 0, 64, "truncate", rollout=i)]
    batch = collate(rows, 0)
    assert batch.rollout_ids is not None and batch.rollout_ids.tolist() == [0, 0, 0, 1]
    picked = batch.select(torch.tensor([3, 1]))
    assert picked.rollout_ids is not None and picked.rollout_ids.tolist() == [1, 0]


# -- a real step of the trainer ---------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before")
def test_a_step_trains_on_a_two_row_rollout(
    generated_groups: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real rollouts of the tiny model, one given a compaction call: the assembler's batch and the
    learner's step (on-policy, so the grpo loss is minus the mean advantage over rollouts), the
    same loss and gradient whether the rollout's rows share a micro-batch or not."""
    trainer, groups = generated_groups()
    rs = groups[0]
    first = next(i for i, r in enumerate(rs) if r.tokens and r.tokens[0].completion_ids)
    r = rs[first]
    summary = TurnTokens(prompt_ids=[*r.tokens[0].prompt_ids[:3], 7, 8], completion_ids=[9, 10, 11],
                         completion_logprobs=[-1.0] * 3)
    rs[first] = r.model_copy(update={"tokens": [*r.tokens, summary], "reward": r.reward + 1.0})
    batch, metrics = trainer._build(groups)
    assert metrics["rollouts/prefix_breaks"] == 1
    assert metrics["rollouts/trained"] == len(batch) - 1
    assert batch.rollout_ids is not None and batch.advantages is not None
    ids, adv = batch.rollout_ids.tolist(), batch.advantages.tolist()
    pair = [k for k, x in enumerate(ids) if ids.count(x) == 2]
    assert len(pair) == 2 and adv[pair[0]] == adv[pair[1]] != 0

    grads: list[Any] = []
    monkeypatch.setattr(trainer.optimizer, "step",
                        lambda *a, **k: grads.append([p.grad.detach().clone() for p in trainer.params]))
    trainer.cfg.skip_zero_advantage = False
    whole = trainer._train_on(batch)
    trainer.cfg.micro_batch_tokens = 2  # every row its own micro-batch
    apart = trainer._train_on(batch)
    per_rollout = {x: a for x, a in zip(ids, adv, strict=True)}
    assert whole["loss"] == pytest.approx(-sum(per_rollout.values()) / len(per_rollout), abs=1e-5)
    assert apart["loss"] == pytest.approx(whole["loss"], abs=1e-6)
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)
    assert any(bool(g.any()) for g in grads[0])


def test_rollouts_cut_by_a_wall_clock_limit_are_counted() -> None:
    """`rollouts/timeouts`: an agent program killed at its `timeout_s` is not the policy's doing (a
    slow server's queue is), so the step says how many there were instead of training on them silently."""
    results = groups(set())
    _, plain = assembler().build(results, 0, "cpu")
    assert plain["rollouts/timeouts"] == 0
    results[1][0].stop_reason, results[1][0].is_truncated = "timeout", True
    _, metrics = assembler().build(results, 0, "cpu")
    assert metrics["rollouts/timeouts"] == 1
