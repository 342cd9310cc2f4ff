"""SFT warm-up: supervised steps on expert episodes before the first RL step, without rollouts.

Why: RL needs some rewarded rollouts to learn from, and a randomly initialised model has none.
The warm-up gives it skills cheaply (no generation, a forward and backward per step). With
``sft_warmup_tokens = "content"`` it trains only what each expert message chose (its text and
tool-call argument values, `trainers.grpo.data.content_spans`), so a tiny model learns to copy the
episode's data before the template's markup; the markup then comes from the RL phase (MIX's
SFT half, or the rewards). Rows and steps are logged to ``warmup.jsonl`` beside ``metrics.jsonl``.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from trainers.grpo.data.batch import TrainRow, collate
from trainers.grpo.learn.logprobs import completion_logps
from trainers.grpo.learn.policy import Policy

__all__ = ["policy_warmup", "progress_line", "run_sft_warmup", "warmup_done_line", "warmup_phases"]


def run_sft_warmup(
    *,
    model: Any,
    optimizer: torch.optim.Optimizer,
    params: Sequence[torch.nn.Parameter],
    rows: Sequence[TrainRow],
    steps: int,
    batch_size: int,
    learning_rate: float,
    max_grad_norm: float | None,
    pad_id: int,
    device: Any,
    seed: int,
    backward: Callable[[torch.Tensor], None],
    clip: Callable[[Sequence[torch.nn.Parameter], float], Any],
    updating: Callable[[], Any],
    log_path: Path | None,
    print_line: Callable[[str], None],
    chunk_tokens: int | None = None,
    print_every: int = 50,
    print_every_s: float = 10.0,
    step_offset: int = 0,
    tokens: str = "",
) -> dict[str, float]:
    """``steps`` SFT steps on ``rows`` (a token mean of -log p over their loss masks); returns a summary.

    The learning rate falls from ``learning_rate`` to a tenth of it on a cosine over the warm-up
    (a constant rate made a tiny model's loss spike and lose a learned copy late in the
    warm-up); the optimizer's own rate is restored after, so the RL phase's schedule starts
    where it would without a warm-up. Adam's moments carry over. ``step_offset`` numbers a second
    phase's log lines after the first's; ``tokens`` names what the phase trains in its log lines.
    """
    if not rows:
        raise ValueError("the SFT warm-up has no expert rows to train on")
    rng = random.Random(seed * 7919 + 4_241)
    saved = [g["lr"] for g in optimizer.param_groups]
    t0 = last_line = time.perf_counter()
    losses: list[float] = []
    log = log_path.open("a") if log_path is not None else None
    try:
        for step in range(1, steps + 1):
            lr = learning_rate * (0.1 + 0.45 * (1 + math.cos(math.pi * (step - 1) / max(steps - 1, 1))))
            for g in optimizer.param_groups:
                g["lr"] = lr
            batch = collate([rows[rng.randrange(len(rows))] for _ in range(batch_size)], pad_id).to(device)
            logp, _ = completion_logps(model, batch, 1.0, with_entropy=False, share_prompts=False,
                                       chunk_tokens=chunk_tokens)
            mask = batch.loss_mask
            loss = -(logp * mask).sum() / mask.sum().clamp(min=1)
            backward(loss)
            grad_norm = float(clip(params, max_grad_norm)) if max_grad_norm is not None else float("nan")
            with updating():
                optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(float(loss.detach()))
            if log is not None:
                line = {"warmup_step": step + step_offset, "loss": losses[-1], "grad_norm": grad_norm,
                        "tokens": int(mask.sum()), "learning_rate": lr, "time_s": time.perf_counter() - t0}
                log.write(json.dumps({**line, "trained": tokens} if tokens else line) + "\n")
            now = time.perf_counter()
            if print_every and (step % print_every == 0 or step == steps or step == 1
                                or now - last_line >= print_every_s):
                last_line = now
                window = losses[-print_every:]
                print_line(progress_line(step, steps, sum(window) / len(window), now - t0, step_offset))
    finally:
        if log is not None:
            log.close()
        for g, lr in zip(optimizer.param_groups, saved, strict=True):
            g["lr"] = lr
    k = max(1, len(losses) // 10)
    return {"warmup/steps": float(steps), "warmup/loss_first": sum(losses[:k]) / k,
            "warmup/loss_last": sum(losses[-k:]) / k, "warmup/time_s": time.perf_counter() - t0}


def progress_line(step: int, steps: int, loss: float, elapsed_s: float, offset: int = 0) -> str:
    """``sft warm-up step 50/1000: loss 3.21 | 0.09 s/step | eta 1:25``: on a busy machine a
    warm-up can take minutes, and a line without an estimate cannot be told from a hang.
    ``offset`` numbers a second phase's steps after the first's (the estimate is this phase's)."""
    per = elapsed_s / max(step, 1)
    left = int(per * (steps - step))
    return (f"sft warm-up step {step + offset}/{steps + offset}: loss {loss:.4f} | {per:.2f} s/step | "
            f"eta {left // 60}:{left % 60:02d}")


def policy_warmup(policy: Policy, cfg: Any, rows: Sequence[TrainRow], *, updating: Callable[[], Any],
                  out: Path, print_line: Callable[[str], None], steps: int | None = None,
                  tokens: str | None = None, step_offset: int = 0, source: str = "") -> dict[str, float]:
    """`run_sft_warmup` on the run's policy and optimizer (the caller then syncs the weights); ``steps``
    and ``tokens`` default to the config's first phase (``sft_warmup_steps``, ``sft_warmup_tokens``);
    ``source`` names the rows' file where it is not ``expert_data``."""
    dist = policy.dist
    steps = cfg.sft_warmup_steps if steps is None else steps
    tokens = cfg.sft_warmup_tokens if tokens is None else tokens
    what = "content" if tokens == "content" else "all assistant tokens"
    print_line(f"sft warm-up: {steps} steps on {len(rows)} expert rows{f' from {source}' if source else ''} ({what})")
    return run_sft_warmup(
        model=policy.model, optimizer=policy.optimizer, params=policy.params, rows=rows,
        steps=steps, batch_size=cfg.sft_warmup_batch_size,
        learning_rate=cfg.sft_warmup_learning_rate or cfg.learning_rate, max_grad_norm=cfg.max_grad_norm,
        pad_id=policy.tokenizer.pad_token_id or 0, device=policy.device, seed=cfg.seed + dist.rank,
        # each rank's loss is the mean over its own rows: DDP's average over ranks is then the mean
        backward=lambda loss: policy.backward(loss / dist.world_size if dist.active else loss, last=True),
        clip=lambda _params, max_norm: policy.clip_grad_norm(max_norm),
        updating=updating, log_path=out / "warmup.jsonl" if dist.is_main else None,
        print_line=print_line, chunk_tokens=cfg.logprob_chunk_tokens, step_offset=step_offset,
        tokens=tokens if cfg.sft_warmup_all_steps else "",
    )


def warmup_phases(policy: Policy, cfg: Any, content_rows: Sequence[TrainRow], all_rows: Sequence[TrainRow], *,
                  updating: Callable[[], Any], out: Path, print_line: Callable[[str], None]) -> dict[str, float]:
    """The run's SFT warm-up: ``sft_warmup_steps`` on ``content_rows`` (``sft_warmup_tokens``), then
    ``sft_warmup_all_steps`` on every assistant token of ``all_rows``; the last phase's summary with
    the phases' total time (the caller then syncs the weights)."""
    all_source = Path(cfg.sft_warmup_all_data).name if cfg.sft_warmup_all_data else ""
    phases = [(content_rows, cfg.sft_warmup_steps, cfg.sft_warmup_tokens, ""),
              (all_rows, cfg.sft_warmup_all_steps, "all", all_source)]
    done, seconds, summary = 0, 0.0, {}
    for rows, steps, tokens, source in phases:
        if steps:
            summary = policy_warmup(policy, cfg, rows, updating=updating, out=out, print_line=print_line,
                                    steps=steps, tokens=tokens, step_offset=done, source=source)
            done, seconds = done + steps, seconds + summary["warmup/time_s"]
    return {**summary, "warmup/time_s": seconds}


def warmup_done_line(summary: dict[str, float]) -> str:
    """The line printed once the warmed-up weights reached the server."""
    return (f"sft warm-up done in {summary['warmup/time_s']:.1f}s: loss "
            f"{summary['warmup/loss_first']:.4f} -> {summary['warmup/loss_last']:.4f}")


def save_warmup_model(sync: Any, policy: Policy, tokenizer: Any, path: Path) -> None:
    """The model as the warm-up left it, saved as ``final_model`` is (rank 0 writes, every rank waits),
    so what RL adds on top can be measured against it (``save_warmup_model``)."""
    if policy.dist.is_main:
        sync.save_final(policy.served(), tokenizer, path)
    policy.dist.barrier()
