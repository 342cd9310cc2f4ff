"""Rollout generation for the trainer: batch k+1 is generated while batch k trains.

A background thread runs its own event loop; the trainer asks for batches by id. Each batch
is ``prompts_per_step`` prompts drawn by the `RepeatSampler` (each prompt ``G`` times in a
row), run through the environment with one request per sample, scored, and stamped with
the policy version the weights had when generation started. Every sample carries its own
seed derived from (run seed, batch id, row), so a batch is reproducible on its own, which is
what makes an interrupted-and-resumed run equal an uninterrupted one.

``num_batches_ahead = 0`` is synchronous (generate after each weight sync); ``k > 0`` keeps
up to ``k`` batches in flight, so their data is at most ``k`` policy versions old.

With several processes (``accelerate launch``), every rank draws the same global prompt
order (one sampler, one seed) and generates only its contiguous share of each batch's
groups (`rank_groups`); group ids and per-sample seeds are those of the global batch, so
the ranks together generate exactly what one process would.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainers.grpo.data.sampler import RepeatSampler, rank_groups
from trainers.grpo.data.scoring import ScoringFailures
from trainers.grpo.data.store import ExperienceStore
from verifiers.envs.environment import Environment
from verifiers.errors import ConfigError, VFError
from verifiers.rollout.inputs import RolloutInput
from verifiers.rollout.runner import run_rollouts
from verifiers.types import GenerateOutputs, RolloutResult


class GenerationTimeoutError(VFError):
    """A batch did not arrive within ``generation_timeout_s``: the server is stuck or far too slow."""


@dataclass
class RolloutBatch:
    batch_id: int
    policy_version: int
    results: list[RolloutResult]
    seconds: float
    sampler_state: dict[str, Any] = field(default_factory=dict)

    def failures(self) -> ScoringFailures:
        """The reward-function failures in this batch's rollouts."""
        return ScoringFailures.of(self.results)

    def put_into(self, store: ExperienceStore) -> list[float]:
        """Put each group (in rollout order) into ``store``; returns the rewards of filtered groups."""
        by_group: dict[int, list[RolloutResult]] = {}
        for r in self.results:
            by_group.setdefault(r.group_id, []).append(r)
        filtered: list[float] = []
        for gid, rs in by_group.items():
            rs.sort(key=lambda r: r.rollout_index)
            status = store.put(gid, {"result": rs, "reward": [r.reward for r in rs]},
                               policy_version=self.policy_version)
            if status == "filtered":
                filtered.extend(r.reward for r in rs)
        return filtered


def sample_seed(run_seed: int, batch_id: int, row: int) -> int:
    return (run_seed * 1_000_003 + batch_id * 10_007 + row) % (2**31 - 1)


_CONFIG_NAMES = (("batch_size", "prompts_per_step"), ("mini_repeat_count", "num_generations"), ("seed", "seed"))
"""Sampler settings and the `TrainConfig` keys they come from, for messages users can act on."""


def check_resumable(saved: dict[str, Any], sampler: RepeatSampler) -> None:
    """Refuse a checkpoint drawn with another batch shape or dataset, in the config's own words.

    The sampler itself would refuse too, but naming its internal settings (``batch_size``,
    ``mini_repeat_count``) that appear nowhere in a training config.
    """
    for internal, key in _CONFIG_NAMES:
        if internal in saved and saved[internal] != getattr(sampler, internal):
            raise ConfigError(
                f"the checkpoint was saved with {key} = {saved[internal]!r}, this run has {key} = "
                f"{getattr(sampler, internal)!r}: resume with {key} = {saved[internal]!r}, or train into a new "
                "output_dir"
            )
    if "num_samples" in saved and saved["num_samples"] != sampler.num_samples:
        raise ConfigError(
            f"the checkpoint's run had {saved['num_samples']} training prompts, this run has {sampler.num_samples}: "
            "resume with the same env_id, env_args and max_prompt_len, or train into a new output_dir"
        )


class BatchGenerator:
    """Generates `RolloutBatch`es in a background event loop (see module doc)."""

    def __init__(
        self,
        env: Environment,
        rows: Sequence[dict[str, Any]],
        *,
        make_client: Callable[[], Any],
        model_name: str,
        sampling_args: dict[str, Any],
        prompts_per_step: int,
        num_generations: int,
        seed: int,
        max_concurrent: int,
        rollout_timeout_s: float | None,
        timeout_s: float,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        self.env = env
        self.rows = list(rows)
        self.model_name = model_name
        self.sampling_args = dict(sampling_args)
        self.P = prompts_per_step
        self.G = num_generations
        self.seed = seed
        self.max_concurrent = max_concurrent
        self.rollout_timeout_s = rollout_timeout_s
        self.timeout_s = timeout_s
        self.groups = rank_groups(prompts_per_step, rank, world_size)  # this rank's share of a batch
        self.sampler = RepeatSampler(len(self.rows), mini_repeat_count=self.G, batch_size=self.P, shuffle=True, seed=seed)
        self._it = iter(self.sampler)
        self._next_id = 0
        self._futures: dict[int, concurrent.futures.Future[RolloutBatch]] = {}
        self._starts: dict[int, dict[str, Any]] = {}  # sampler state before each in-flight batch was drawn
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="vf-generator", daemon=True)
        self._thread.start()
        self._client = self._call(self._make_client(make_client))

    async def _make_client(self, make: Callable[[], Any]) -> Any:
        return make()

    @classmethod
    def for_run(cls, cfg: Any, env: Environment, rows: Sequence[dict[str, Any]], sync: Any,
                sampling_args: dict[str, Any], dist: Any) -> BatchGenerator:
        """The generator of a `TrainConfig`'s run, calling ``sync``'s client, this rank's share of each batch."""
        return cls(env, rows, make_client=sync.make_client, model_name=sync.model_name, sampling_args=sampling_args,
                   prompts_per_step=cfg.prompts_per_step, num_generations=cfg.num_generations, seed=cfg.seed,
                   max_concurrent=cfg.max_concurrent, rollout_timeout_s=cfg.rollout_timeout_s,
                   timeout_s=cfg.generation_timeout_s, rank=dist.rank, world_size=dist.world_size)
    def _call(self, coro: Any, timeout: float | None = None) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    # -- prompts ---------------------------------------------------------------------------
    def _draw(self) -> list[int]:
        """The next ``P`` prompt indices (each repeated ``G`` times by the sampler)."""
        out: list[int] = []
        while len(out) < self.P * self.G:
            try:
                out.append(next(self._it))
            except StopIteration:
                self._it = iter(self.sampler)  # next epoch, new permutation
        return out[:: self.G]

    @property
    def next_batch_id(self) -> int:
        return self._next_id

    def state_dict(self) -> dict[str, Any]:
        """Where the next *unconsumed* batch starts: in-flight batches are regenerated on resume.

        This must not depend on whether an in-flight batch happens to be finished yet, or a
        resumed run would skip it on one machine and replay it on another.
        """
        if self._futures:
            first = min(self._futures)
            return {"next_batch_id": first, "sampler": self._starts[first]}
        return {"next_batch_id": self._next_id, "sampler": self.sampler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.cancel_pending()
        check_resumable(state["sampler"], self.sampler)
        self._next_id = int(state["next_batch_id"])
        self.sampler.load_state_dict(state["sampler"])
        self._it = iter(self.sampler)

    @property
    def groups_per_rank(self) -> int:
        """Groups of one batch that this process generates (``prompts_per_step`` / world size)."""
        return len(self.groups)

    # -- generation ------------------------------------------------------------------------
    def submit(self, policy_version: int) -> int:
        """Start generating the next batch with the current weights; returns its id."""
        batch_id = self._next_id
        self._next_id += 1
        sampler_state = self.sampler.state_dict()
        inputs = self.rollout_inputs(batch_id, self._draw())
        fut = asyncio.run_coroutine_threadsafe(self._generate(batch_id, policy_version, inputs, sampler_state), self._loop)
        self._futures[batch_id] = fut
        self._starts[batch_id] = sampler_state
        return batch_id

    def rollout_inputs(self, batch_id: int, prompt_idx: Sequence[int]) -> list[RolloutInput]:
        """This rank's requests of batch ``batch_id`` (``prompt_idx``: the batch's global prompts).

        Group ids and seeds come from the position ``g`` in the global batch, not in this
        rank's share, so they do not depend on the number of processes.
        """
        inputs: list[RolloutInput] = []
        for g in self.groups:
            idx = prompt_idx[g]
            row = self.rows[idx]
            for r in range(self.G):
                inputs.append(
                    RolloutInput(
                        example_id=int(row.get("example_id", idx)),
                        prompt=row["prompt"],
                        answer=row.get("answer", "") or "",
                        task=row.get("task") or "default",
                        info=row.get("info") or {},
                        group_id=batch_id * self.P + g,
                        rollout_index=r,
                        extra={"sampling_args": {"seed": sample_seed(self.seed, batch_id, g * self.G + r)}},
                    )
                )
        return inputs

    async def _generate(
        self, batch_id: int, version: int, inputs: list[RolloutInput], sampler_state: dict[str, Any]
    ) -> RolloutBatch:
        t = time.perf_counter()
        results = await run_rollouts(
            self.env,
            self._client,
            self.model_name,
            inputs,
            sampling_args=self.env.merge_sampling_args(self.sampling_args),
            max_concurrent=self.max_concurrent,
            rollout_timeout_s=self.rollout_timeout_s,
        )
        return RolloutBatch(batch_id, version, results, time.perf_counter() - t, sampler_state)

    def metrics(self) -> dict[str, float]:
        """Generator metrics for the step's log row (none in process; Ray adds its retries)."""
        return {}

    def in_flight(self) -> int:
        return len(self._futures)

    def get(self, batch_id: int) -> RolloutBatch:
        """Block until batch ``batch_id`` is ready; raises `GenerationTimeoutError` after the timeout."""
        fut = self._futures.get(batch_id)
        if fut is None:
            raise KeyError(f"batch {batch_id} was never submitted")
        try:
            batch = fut.result(self.timeout_s)
        except concurrent.futures.TimeoutError:
            raise GenerationTimeoutError(
                f"batch {batch_id} took longer than generation_timeout_s={self.timeout_s:g}s; "
                "check the inference server or raise the timeout"
            ) from None
        del self._futures[batch_id]
        self._starts.pop(batch_id, None)
        return batch

    def evaluate(self, num_examples: int, sampling_args: dict[str, Any]) -> GenerateOutputs:
        async def run() -> GenerateOutputs:
            return await self.env.a_evaluate(
                self._client, self.model_name, sampling_args=sampling_args, num_examples=num_examples,
                rollouts_per_example=1, max_concurrent=self.max_concurrent,
            )

        return self._call(run(), timeout=self.timeout_s)

    def cancel_pending(self) -> None:
        """Drop in-flight batches and rewind, so the next `submit` draws the first of them again."""
        if self._futures:
            first = min(self._futures)
            self._next_id = first
            self.sampler.load_state_dict(self._starts[first])
            self._it = iter(self.sampler)
        for fut in self._futures.values():
            fut.cancel()
        self._futures.clear()
        self._starts.clear()

    def close(self) -> None:
        self.cancel_pending()

        async def shutdown() -> None:
            # Let cancelled batches finish unwinding (cleanup hooks) before the loop stops.
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in others:
                t.cancel()
            await asyncio.gather(*others, return_exceptions=True)
            close = getattr(self._client, "close", None)
            if close is not None:
                await close()

        with contextlib.suppress(Exception):  # closing is best effort; the loop goes away next
            self._call(shutdown(), timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
