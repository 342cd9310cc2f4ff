"""Micro-batches by a token budget: within budget, groups whole, little padding, reproducible, same gradient.

The loss of each micro-batch is its share of the whole step's loss (the normaliser counts the
whole step), so the accumulated gradient must not depend on how the step is split: checked
for a budget split against one micro-batch, on the loss function and through the trainer.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
import torch

from trainers.grpo.algo.algorithms import compute_loss, get_algorithm
from trainers.grpo.algo.losses import LossNormalizer
from trainers.grpo.data.batch import TrainBatch, TrainRow, collate
from trainers.grpo.data.microbatch import micro_batches, padded_tokens, plan_micro_batches
from trainers.grpo.learn.logprobs import completion_logps


def random_rows(seed: int, groups: int = 12, group_size: int = 4) -> tuple[list[int], list[int]]:
    """Lengths (a long tail, as completions have) and group ids; a few ungrouped (expert) rows too."""
    rng = random.Random(seed)
    lengths, ids = [], []
    for g in range(groups):
        prompt = rng.randint(4, 30)
        for _ in range(group_size):
            lengths.append(prompt + int(rng.paretovariate(1.2) * 8))
            ids.append(g)
    for _ in range(3):
        lengths.append(rng.randint(5, 60))
        ids.append(-1)
    return lengths, ids


@pytest.mark.parametrize("budget", [40, 150, 400, 5000])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_plan_covers_every_row_once_within_budget(budget: int, seed: int) -> None:
    lengths, groups = random_rows(seed)
    plan = plan_micro_batches(lengths, groups, budget, torch.Generator().manual_seed(seed))
    assert sorted(i for mb in plan for i in mb) == list(range(len(lengths)))
    for mb in plan:
        assert padded_tokens(lengths, mb) <= budget or len(mb) == 1  # one over-long row alone
    where = {i: k for k, mb in enumerate(plan) for i in mb}
    for g in set(groups) - {-1}:
        rows = [i for i, x in enumerate(groups) if x == g]
        if padded_tokens(lengths, rows) <= budget:  # a group that fits is never split
            assert len({where[i] for i in rows}) == 1


def test_plan_is_reproducible_and_seeded() -> None:
    lengths, groups = [10] * 16, [i // 2 for i in range(16)]  # all ties: only the seed orders them
    plan = lambda s: plan_micro_batches(lengths, groups, 40, torch.Generator().manual_seed(s))  # noqa: E731
    assert plan(3) == plan(3)
    assert plan(3) != plan(4)
    assert sorted(map(sorted, plan(3))) != sorted(map(sorted, plan(4)))


def test_length_bucketing_pads_less_than_a_random_split() -> None:
    lengths, groups = random_rows(0, groups=16)
    plan = plan_micro_batches(lengths, groups, 600, torch.Generator().manual_seed(0))
    perm = torch.randperm(len(lengths), generator=torch.Generator().manual_seed(0))
    random_split = [p.tolist() for p in perm.chunk(len(plan))]
    padding = lambda p: sum(padded_tokens(lengths, mb) for mb in p) - sum(lengths)  # noqa: E731
    assert padding(plan) < 0.5 * padding(random_split)


def test_micro_batches_of_a_batch_are_cpu_indices() -> None:
    rows = [TrainRow(list(range(2 + n)), [1] * (1 + n), [0.0] * (1 + n), 0.0, n % 3, False, 1 + n, prompt_len=1)
            for n in range(9)]
    parts = micro_batches(collate(rows, 0), 20)
    assert all(p.device.type == "cpu" and p.dtype == torch.long for p in parts)
    assert sorted(torch.cat(parts).tolist()) == list(range(9))


# -- the gradient does not depend on the split -------------------------------------------------
def grad_of(model: Any, batch: TrainBatch, parts: list[torch.Tensor], preset: Any) -> dict[str, torch.Tensor]:
    """Accumulated gradient of the step loss over ``parts``, normalised over the whole batch like the trainer."""
    model.zero_grad(set_to_none=True)
    normalizer = LossNormalizer.from_batch(batch.loss_mask, max_completion_len=16)
    for part in parts:
        sub = batch.select(part)
        logp, entropy = completion_logps(model, sub, entropy_grad=True, chunk_tokens=7)
        loss, _ = compute_loss(preset, logp=logp, advantages=sub.advantages, loss_mask=sub.loss_mask,
                               entropy=entropy, normalizer=normalizer)
        loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return grads


@pytest.mark.parametrize("algorithm", ["grpo", "dr_grpo"])
def test_budget_split_gives_the_single_micro_batch_gradient(algorithm: str) -> None:
    pytest.importorskip("transformers")
    from verifiers.models.tiny import TinyModelSpec, build_tiny_model

    torch.set_num_threads(1)
    model = build_tiny_model(TinyModelSpec(hidden_size=32))[0]
    g = torch.Generator().manual_seed(0)
    rows = []
    for grp in range(4):
        prompt = torch.randint(0, 100, (int(torch.randint(3, 8, (1,), generator=g)),), generator=g).tolist()
        for _ in range(3):
            n = int(torch.randint(2, 14, (1,), generator=g))
            rows.append(TrainRow(prompt + torch.randint(0, 100, (n,), generator=g).tolist(),
                                 [0] * (len(prompt) - 1) + [1] * n, [0.0] * (len(prompt) + n - 1),
                                 float(torch.rand(1, generator=g)), grp, False, n, prompt_len=len(prompt)))
    batch = collate(rows, 0)
    batch.advantages = torch.randn(len(rows), generator=g)
    preset = get_algorithm(algorithm, entropy_coef=0.01)
    whole = grad_of(model, batch, [torch.arange(len(rows))], preset)
    parts = micro_batches(batch, 40, torch.Generator().manual_seed(1))
    assert len(parts) > 2
    split = grad_of(model, batch, parts, preset)
    assert whole.keys() == split.keys()
    for name, grad in whole.items():
        torch.testing.assert_close(split[name], grad, atol=1e-6, rtol=1e-5, msg=name)


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before")
def test_trainer_step_by_token_budget_gives_the_same_update(
    generated_batch: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One generated batch, trained with one micro-batch and with a small token budget: same loss and grad norm."""
    trainer, batch = generated_batch(algorithm_overrides={"entropy_coef": 0.01})
    monkeypatch.setattr(trainer.optimizer, "step", lambda *a, **k: None)  # the weights stay put
    whole = trainer._train_on(batch)
    assert trainer.cfg.micro_batch_tokens is None and trainer.cfg.gradient_accumulation_steps == 1
    widest = int(batch.attention_mask.sum(1).max())
    trainer.cfg.micro_batch_tokens = 2 * widest  # at most two rows a micro-batch
    split = trainer._train_on(batch)
    assert split["loss"] == pytest.approx(whole["loss"], rel=1e-5, abs=1e-7)
    assert split["grad_norm"] == pytest.approx(whole["grad_norm"], rel=1e-5)
    assert split["entropy"] == pytest.approx(whole["entropy"], rel=1e-5)
