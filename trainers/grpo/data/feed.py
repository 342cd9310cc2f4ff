"""The step feed: whole groups for each step, from the generator through the experience store.

It keeps ``num_batches_ahead`` batches in flight, refills when the store filtered or evicted
groups, and stops the run on a reward function that fails everywhere. With several processes
every rank takes the same decisions on global values, in the same order of collectives
(``every_rank``, ``any_rank``, ``sum_values``): a different order deadlocks the ranks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainers.grpo.data.generator import BatchGenerator, RolloutBatch
from trainers.grpo.data.scoring import ScoringFailures, stop_if_broken
from trainers.grpo.data.store import ExperienceStore
from trainers.grpo.dist.heap import resident_memory_gb
from trainers.grpo.dist.ranks import Dist
from verifiers.errors import ConfigError
from verifiers.types import RolloutResult

COLUMNS = ("result", "reward")
"""The store's columns: the rollout and its reward."""


def step_metrics(version: int, versions: list[int], info: dict[str, float], t_train: float,
                 t_step: float, now: float) -> dict[str, float]:
    """Staleness, the new policy version, timings, refills and this process's memory of a step that trained."""
    return {
        "staleness": float(max(0, version - 1 - min(versions))),
        "policy_version": float(version),
        "time/generation_s": info["gen_s"],
        "time/train_s": now - t_train,
        "time/step_s": now - t_step,
        "refills": info["refills"],
        **resident_memory_gb(),
    }


def store_kwargs(cfg: Any, filter_zero_std: bool) -> dict[str, Any]:
    """How the run's `ExperienceStore` (or the Ray store actor) is built."""
    return {"consumers": ("trainer",), "columns": COLUMNS, "max_staleness": cfg.max_staleness,
            "filter_zero_std": filter_zero_std, "seed": cfg.seed}


class NothingToTrain(Exception):
    """Every group of a step had equal rewards, even after refills (``totals``: summed rewards, count)."""

    def __init__(self, totals: dict[str, float]) -> None:
        super().__init__("no trainable groups")
        self.totals = totals

    def metrics(self, version: int, step_s: float) -> dict[str, float]:
        """The log row of the skipped step (mean reward of the filtered groups)."""
        return {"reward": self.totals["r"] / max(self.totals["n"], 1.0), "skipped": 1.0,
                "frac_reward_zero_std": 1.0, "policy_version": float(version), "time/step_s": step_s}


class StepFeed:
    """Takes whole groups for one step, keeping the generator ``num_batches_ahead`` batches ahead."""

    def __init__(self, cfg: Any, generator: BatchGenerator, store: ExperienceStore, env: Any, dist: Dist) -> None:
        self.cfg = cfg
        self.generator = generator
        self.store = store
        self.env = env
        self.dist = dist
        self.pending: list[int] = []  # ids of the batches in flight, oldest first
        self.on_errors: Callable[[ScoringFailures, int], None] | None = None
        """Shows new scoring errors (rank 0, once the run watch exists)."""

    def take(self, step: int, version: int) -> tuple[list[list[RolloutResult]], list[int], dict[str, float]]:
        """Whole groups for step ``step + 1``, refilling when the store filtered or evicted some."""
        cfg = self.cfg
        filtered: list[float] = []
        info = {"refills": 0.0, "gen_s": 0.0}
        # With nothing in flight (synchronous mode, or the first step) this step's own batch is
        # generated here and is not a refill; every further generation is.
        regular = 0 if self.pending else 1
        submitted = 0
        share = self.generator.groups_per_rank  # prompts_per_step with one process
        while True:
            # With several processes every rank takes the same decisions (on global values), so
            # all of them submit, and draw from the shared prompt order, the same batches.
            if self.dist.every_rank(self.store.num_available("trainer", list(COLUMNS)) >= share):
                got = self.store.get("trainer", list(COLUMNS), share)
                assert got is not None  # only this thread takes from or evicts in the store
                break
            if not self.pending:
                if submitted >= regular and submitted - regular >= cfg.max_refills:
                    got = self.store.get("trainer", list(COLUMNS), share, allow_partial=True)
                    if self.dist.any_rank(got is None) and step > 0:
                        # Equal rewards in every group after training started: usually a solved task
                        # (every sample scores the maximum). Nothing to learn from; not an error.
                        raise NothingToTrain(self.dist.sum_values({"r": sum(filtered), "n": len(filtered)}))
                    if self.dist.any_rank(got is None):
                        raise ConfigError(
                            "no trainable groups after refills: every group had equal rewards (or went stale); "
                            "raise max_refills, lower filtering, or check the reward functions"
                        )
                    assert got is not None
                    break
                self.pending.append(self.generator.submit(version))
                submitted += 1
            batch = self.generator.get(self.pending.pop(0))
            info["gen_s"] += batch.seconds
            filtered.extend(self._store(batch, step))
        while len(self.pending) < cfg.num_batches_ahead:
            self.pending.append(self.generator.submit(version))
        info["refills"] = float(max(0, submitted - regular))
        groups: dict[int, list[RolloutResult]] = {}
        for gi, res in zip(got.group_index, got.columns["result"], strict=True):
            groups.setdefault(gi, []).append(res)
        return list(groups.values()), list(got.policy_versions), info

    def _store(self, batch: RolloutBatch, step: int) -> list[float]:
        """Check the batch's scoring, then store it; returns the rewards of the groups filtered out.

        Ray batches were stored by their workers already (`RolloutBatch.put_into` knows which).
        """
        failures = batch.failures()
        if self.dist.is_main and self.on_errors is not None:
            self.on_errors(failures, step + 1)
        stop_if_broken(failures, stop_share=self.cfg.reward_error_stop_share, step=step + 1, dist=self.dist)
        return batch.put_into(self.store)

    def evaluate(self, sampling_args: dict[str, Any]) -> dict[str, float]:
        """Mean reward (and each reward function's mean) on ``eval_num_examples`` examples."""
        out = self.generator.evaluate(self.cfg.eval_num_examples, self.env.merge_sampling_args(sampling_args))
        rewards = list(out.reward)
        metrics = {"eval/reward": sum(rewards) / max(len(rewards), 1)}
        for k, vs in (out.metrics or {}).items():
            if vs:
                metrics[f"eval/rewards/{k}"] = sum(vs) / len(vs)
        return metrics
