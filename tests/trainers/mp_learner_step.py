"""One learner step of the real trainer on a fixed batch, split over the processes of a launch.

``accelerate launch --multi_gpu --num_processes N tests/trainers/mp_learner_step.py CONFIG.json OUT [split]``
(or `learner_step` called in one process): every rank sets up a `GRPOTrainer`, takes its
share of the same fixed global batch (whole groups, `rank_groups`) and runs one optimizer
step through the trainer's own code (global normaliser, advantages and metrics). Each rank
writes ``rank<r>.json`` (its step metrics) and ``params_rank<r>.pt`` (weights after the step).
Generation is not involved, so the batch is identical whatever the number of processes.
With ``split``, each group's first rollout is two token rows (its history broke once), and the
advantages are the assembler's, once per rollout.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import torch

GROUPS = 4
GROUP_SIZE = 3


def fixed_rows(vocab: int, groups: range, split: bool = False) -> list[Any]:
    """The rows of ``groups`` of a seeded global batch (each group's rows share a prompt); with
    ``split`` each group's first rollout is two rows of one rollout (the second on its own prompt)."""
    from trainers.grpo.data.batch import TrainRow

    gen = torch.Generator().manual_seed(1234)
    rows = []
    for g in range(GROUPS):  # draw every group, keep ours: a group's rows do not depend on the split
        prompt = torch.randint(3, vocab, (4,), generator=gen).tolist()
        for k in range(GROUP_SIZE):
            n = int(torch.randint(2, 6, (1,), generator=gen))
            completion = torch.randint(3, vocab, (n,), generator=gen).tolist()
            reward = float(torch.rand(1, generator=gen))
            if g in groups and split and k == 0:
                parts = [(prompt, completion[:1]), (prompt[::-1], completion[1:])]
                for p, c in parts:
                    ids = p + c
                    rows.append(TrainRow(input_ids=ids, loss_mask=[0] * (len(p) - 1) + [1] * len(c),
                                         sampler_logp=[0.0] * (len(ids) - 1), reward=reward, group=g,
                                         is_truncated=False, completion_len=len(c), prompt_len=len(p),
                                         rollout=g * GROUP_SIZE + k))
            elif g in groups:
                ids = prompt + completion
                mask = [0] * (len(prompt) - 1) + [1] * n
                rows.append(TrainRow(input_ids=ids, loss_mask=mask, sampler_logp=[0.0] * (len(ids) - 1),
                                     reward=reward, group=g, is_truncated=False, completion_len=n,
                                     prompt_len=len(prompt)))
    return rows


def learner_step(cfg_path: Path, out: Path, split: bool = False) -> dict[str, float]:
    """Set up the trainer, train one step on this rank's share of the fixed batch, write the results."""
    from rich.console import Console

    from trainers.grpo.config import TrainConfig
    from trainers.grpo.data.batch import collate
    from trainers.grpo.data.sampler import rank_groups
    from trainers.grpo.trainer import GRPOTrainer

    cfg = TrainConfig.model_validate_json(cfg_path.read_text())
    trainer = GRPOTrainer(cfg, console=Console(file=io.StringIO()))
    try:
        trainer.setup()
        dist = trainer.dist
        vocab = trainer.accelerator.unwrap_model(trainer.model).config.vocab_size
        rows = fixed_rows(vocab, rank_groups(GROUPS, dist.rank, dist.world_size), split)
        batch = collate(rows, trainer.tokenizer.pad_token_id or 0).to(trainer.device)
        if split:
            batch.advantages, _ = trainer.assembler.rollout_advantages(rows, batch)
        else:
            batch.advantages, _ = trainer._advantages(batch.rewards, batch.group_ids)
        metrics = trainer._global_train_metrics(trainer._optimize(batch))
        out.mkdir(parents=True, exist_ok=True)
        (out / f"rank{dist.rank}.json").write_text(json.dumps({"world_size": dist.world_size, **metrics}))
        if trainer.policy.sharded:  # FSDP: the whole weights, gathered (every rank takes part)
            from trainers.grpo.learn.fsdp import full_state_dict

            state = full_state_dict(trainer.model)
        else:
            state = trainer.accelerator.unwrap_model(trainer.model).state_dict()
        torch.save({k: v.detach().cpu() for k, v in state.items()}, out / f"params_rank{dist.rank}.pt")
        return metrics
    finally:
        trainer.sync.close()
        trainer.generator.close()
        trainer.dist.close()


if __name__ == "__main__":
    learner_step(Path(sys.argv[1]), Path(sys.argv[2]), split=sys.argv[3:4] == ["split"])
