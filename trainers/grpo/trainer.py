"""The GRPO training loop: generate → store → advantages → clipped loss (+KL) → step → sync.

Read top to bottom, `GRPOTrainer._train` is the whole algorithm; each job around it is one
collaborator built in `setup`: the `StepFeed` takes whole groups of scored rollouts from the
generator through the `ExperienceStore` (refilling what the store filtered), the
`BatchAssembler` turns them into a padded batch with group-relative advantages, the `Learner`
runs the preset's loss in micro-batches on the `Policy` and steps the optimizer, the weight
sync pushes the new weights to the server, and the `Checkpointer`, `RunDisplay` and
`StopSignals` handle saving, the console and Ctrl-C.
"""

from __future__ import annotations

import contextlib
import random
import time
from pathlib import Path
from typing import Any

import torch
from rich.markup import escape

from trainers.grpo.algo.algorithms import AlgorithmPreset, get_algorithm
from trainers.grpo.config import TrainConfig, validate_processes, validate_run
from trainers.grpo.data.assemble import BatchAssembler, markup_token_ids
from trainers.grpo.data.batch import TrainBatch
from trainers.grpo.data.feed import NothingToTrain, StepFeed, step_metrics
from trainers.grpo.data.prompts import expert_sets, training_rows
from trainers.grpo.data.scoring import RewardFunctionError
from trainers.grpo.dist.heap import retain_freed_memory
from trainers.grpo.dist.ranks import Dist
from trainers.grpo.dist.threads import choose_torch_threads
from trainers.grpo.learn.policy import Policy, build_policy, resolve_model_path
from trainers.grpo.learn.step import Learner
from trainers.grpo.learn.warmup import save_warmup_model, warmup_done_line, warmup_phases
from trainers.grpo.ray.placement import build_rollouts
from trainers.grpo.run.checkpoint import Checkpointer
from trainers.grpo.run.display import RunDisplay
from trainers.grpo.run.outdir import prepare_output_dir
from trainers.grpo.run.reporting import MetricsLogger, TrainSummary, summarize
from trainers.grpo.run.signals import StopSignals
from trainers.grpo.sync.managed import ManagedServers
from trainers.grpo.sync.mirrored import MirroredSync
from trainers.grpo.sync.weight_sync import WeightSync, make_weight_sync
from verifiers.envs.loader import load_environment
from verifiers.errors import ServerError
from verifiers.gc_freeze import startup_objects_frozen
from verifiers.types import RolloutResult


class GRPOTrainer:
    """One GRPO run: `setup` builds the collaborators, `train` runs the loop and returns a summary."""

    def __init__(self, cfg: TrainConfig, *, console: Any = None) -> None:
        from rich.console import Console

        self.cfg = cfg
        self.console = console or Console()
        self.out = Path(cfg.output_dir)
        self.preset: AlgorithmPreset = get_algorithm(cfg.algorithm, **cfg.algorithm_overrides)
        validate_run(cfg, self.preset)
        self.resume: str | bool = False  # what `train` was asked to resume (the output directory check reads it)
        self.step, self.version = 0, 0
        self.dist = Dist()  # one process until `setup` joins a launched run
        self.ray: Any = None  # `RayRollouts` when the config has [ray]
        self.sync: WeightSync | None = None  # `setup` builds it and the other collaborators
        self.servers = ManagedServers()
        self.stop = StopSignals(self.console)
        self.reward_history: list[float] = []
        self._step_start: dict[str, Any] | None = None  # data state at the start of the step in progress
        self._unsynced: dict[str, float] | None = None  # a trained step's metrics while its sync runs
        self._last_groups: list[list[RolloutResult]] = []

    # The policy's parts, where tests and subclasses read them.
    model = property(lambda self: self.policy.model)
    ref_model = property(lambda self: self.policy.ref_model)
    tokenizer = property(lambda self: self.policy.tokenizer)
    params = property(lambda self: self.policy.params)
    optimizer = property(lambda self: self.policy.optimizer)
    scheduler = property(lambda self: self.policy.scheduler)
    accelerator = property(lambda self: self.policy.accelerator)

    device = property(lambda self: self.policy.device,  # settable: batches and autocast follow it
                      lambda self, device: setattr(self.policy, "device", device))

    def setup(self) -> None:
        """Join the other processes, then build the policy, the sync, the data path and the learner."""
        cfg = self.cfg
        self.dist = Dist.start(cpu=not torch.cuda.is_available())  # under `accelerate launch`: join the others
        if self.dist.active:
            validate_processes(cfg, self.dist.world_size)
        if not self.dist.is_main:
            self.console.quiet = True  # only rank 0 prints and writes files
        self.show = RunDisplay(cfg, self.console, self.dist, self.preset)
        prepare_output_dir(self.out, self.dist, cfg, resume=bool(self.resume))  # checked, marked, config.json
        threads, why = choose_torch_threads(cfg.torch_threads, self.dist.local_world_size)
        if threads is not None:
            torch.set_num_threads(threads)
        self.show.threads = f"{torch.get_num_threads()} ({why})"
        if cfg.retain_freed_memory:
            self.show.malloc = retain_freed_memory()
        random.seed(cfg.seed)
        torch.manual_seed(cfg.seed)
        model_path = resolve_model_path(cfg, self.out, self.dist, self.show.print)
        self.policy: Policy = build_policy(cfg, self.preset, model_path, self.dist)
        urls = self.servers.start(cfg, model_path, self.out, self.console.print, self.dist)  # rank 0 starts them
        # Each rank's embedded engine samples with its own seed (seed + rank) where a request has none.
        # ``model`` as resolved (a GGUF or registry name is its converted directory): the probe's
        # tolerance reads the served checkpoint's dtype from its config.json.
        sync_cfg = cfg.model_copy(update={"model": model_path} if self.dist.is_main
                                  else {"model": model_path, "seed": cfg.seed + self.dist.rank})
        self.sync = make_weight_sync(sync_cfg, self.policy.served(), self.tokenizer, self.out, urls,
                                     log=self.console.print, dist=self.dist)
        if self.policy.sharded:  # FSDP: the engine and the sync read a full copy, gathered after each step
            self.sync = MirroredSync(self.sync, self.policy.refresh_mirror)
        self.env = load_environment(cfg.env_id, **cfg.env_args)
        self.env.use_tokenizer(self.tokenizer)  # e.g. an agent program's calls then continue token-exactly
        rows = training_rows(self.env, self.tokenizer, cfg, self.console.print)
        self.sampling_args = cfg.sampling_args()
        self.reward_history = []
        # The generator and the store: in this process, or Ray workers and a store actor (``[ray]``).
        self.generator, self.store, self.ray = build_rollouts(self.cfg, self.preset, self.dist, self.sync, self.env,
                                                              rows, self.sampling_args)
        # Expert rows for MIX's SFT half and for the two SFT warm-up phases (content, every token).
        self.expert, self.warmup_rows, self.warmup_all_rows = expert_sets(cfg, self.preset, self.tokenizer)
        self.feed = StepFeed(cfg, self.generator, self.store, self.env, self.dist)
        self.assembler = BatchAssembler(cfg, self.preset, self.dist, self.tokenizer.pad_token_id or 0, self.expert,
                                        markup_token_ids(self.tokenizer))
        self.learner = Learner(cfg, self.preset, self.dist, self.policy, updating=self.sync.updating,
                               with_expert=bool(self.expert), on_commit=self.stop.commit)
        self.ckpt = Checkpointer(cfg, self.out, self.dist, self.console, self.policy, self.generator, self.store,
                                 self.sync)

    def _take_batch(self) -> tuple[list[list[RolloutResult]], list[int], dict[str, float]]:
        return self.feed.take(self.step, self.version)

    def _build(self, groups: list[list[RolloutResult]]) -> tuple[TrainBatch, dict[str, float]]:
        return self.assembler.build(groups, self.step, self.device)

    def _advantages(self, rewards: torch.Tensor, group_ids: torch.Tensor) -> tuple[torch.Tensor, Any]:
        return self.assembler.advantages(rewards, group_ids)

    def _optimize(self, batch: TrainBatch) -> dict[str, float]:
        """One optimizer step (or ``num_iterations``) on ``batch``, under the configured precision."""
        with self.policy.autocast():
            return self._train_on(batch)

    def _train_on(self, batch: TrainBatch) -> dict[str, float]:
        return self.learner.train_on(batch, self.step)

    def _global_train_metrics(self, metrics: dict[str, float]) -> dict[str, float]:
        return self.learner.global_metrics(metrics)

    def _reference(self) -> contextlib.AbstractContextManager[Any]:
        return self.policy.reference(self.sync.updating)

    def _sft_warmup(self) -> None:
        """The SFT warm-up on this run's policy (content, then every token), then the weights go to the server."""
        summary = warmup_phases(self.policy, self.cfg, self.warmup_rows, self.warmup_all_rows,
                                updating=self.sync.updating, out=self.out, print_line=self.show.print)
        self.sync.after_step(self.version)  # a server of its own (vLLM, vf-serve) gets the warmed-up weights
        self.show.print(warmup_done_line(summary))
        if self.cfg.save_warmup_model:  # what the warm-up alone made, to evaluate apart from RL's share
            save_warmup_model(self.sync, self.policy, self.tokenizer, self.out / "warmup_model")

    def _checkpoint(self, data_state: dict[str, Any] | None = None, *, together: bool = True) -> Path:
        """``data_state``: the one taken at the start of an unfinished step (see `Checkpointer.save`)."""
        state = data_state or self.ckpt.data_state(self.step, self.version, self.reward_history)
        return self.ckpt.save(self.step, state, together=together)

    def train(self, resume: str | bool = False) -> TrainSummary:
        try:
            return self._train(resume)
        finally:
            self.close()

    def close(self) -> None:
        """Whatever ended the run: the sync's resources (a weight copy in /dev/shm, an NCCL group,
        the engine thread) are released and managed vLLM servers do not outlive it."""
        if self.ray is not None:  # workers, store actor, the engine's HTTP server; Ray if we started it
            with contextlib.suppress(Exception):
                self.ray.close()
        if self.sync is not None:
            with contextlib.suppress(Exception):
                self.sync.close()
        self.servers.stop()
        self.dist.close(getattr(self, "policy", None))  # the policy's DDP wrapper is let go first

    def _train(self, resume: str | bool) -> TrainSummary:
        cfg = self.cfg
        self.resume = resume
        self.setup()
        t0 = time.perf_counter()  # the run's wall time includes an SFT warm-up
        resumed = self.ckpt.resume(resume) if resume else None  # None: no checkpoint, the run starts fresh
        if resumed is not None:
            self.step, self.version, self.reward_history = resumed.step, resumed.version, resumed.reward_history
        # The banner comes first: what runs, on what, where, before any slow phase (the warm-up).
        facts = self.show.facts(self.policy, len(self.generator.rows), self.step, self.out)
        self.feed.on_errors = (watch := self.show.start(self.step, facts, self.device)).errors
        if resumed is None:
            self.sync.on_start(self.version)
            if (cfg.sft_warmup_steps or cfg.sft_warmup_all_steps) and self.step == 0:
                try:
                    self._sft_warmup()
                except BaseException:  # Ctrl-C included: nothing to save yet (a new run warms up again)
                    self.generator.close()
                    raise
        logger = MetricsLogger(self.out, cfg.report_to, run_name=self.out.name, config=cfg.model_dump(mode="json"),
                               resume_step=self.step if resume else None, enabled=self.dist.is_main)
        interrupted, self._step_start, self._unsynced = False, None, None
        self.stop.install()
        try:
            # startup_objects_frozen: no full collection walks the model, engine and libraries every few steps
            with self.show.running(self.step), startup_objects_frozen():
                while self.step < cfg.max_steps:
                    if self.dist.any_rank(self.stop.requested):  # all ranks stop at the same step
                        raise KeyboardInterrupt
                    self._step_start = self.ckpt.data_state(self.step, self.version, self.reward_history)
                    watch.enter("generating", self.step + 1)
                    t_step = time.perf_counter()
                    try:
                        groups, versions, info = self._take_batch()
                    except NothingToTrain as nothing:
                        # Logged as a step without an update, so the curve shows it and the run goes on.
                        self.step += 1
                        self._step_start = None
                        skipped = nothing.metrics(self.version, time.perf_counter() - t_step)
                        self.reward_history.append(skipped["reward"])
                        logger.log(self.step, skipped)
                        self.show.skipped(self.step, skipped["reward"], cfg.max_refills)
                        continue
                    batch, metrics = self._build(groups)
                    watch.enter("learning", self.step + 1)
                    t_train = time.perf_counter()
                    metrics.update(self._global_train_metrics(self._optimize(batch)))
                    self.version += 1
                    self.step += 1
                    self._step_start = None  # the step is complete: a checkpoint from here on holds it
                    self._unsynced = metrics  # logged by the handler below if the sync fails
                    watch.enter("syncing weights", self.step)
                    metrics.update(self.sync.after_step(self.version))  # vLLM: timings, probe, requests
                    self._unsynced = None
                    self.store.set_policy_version(self.version)  # after every rank's sync (Ray: rank 0's store)
                    self.stop.settled()
                    metrics.update(step_metrics(self.version, versions, info, t_train, t_step, time.perf_counter()))
                    metrics.update(self.generator.metrics())  # Ray: groups rerun because a worker died
                    if cfg.eval_every and self.step % cfg.eval_every == 0 and self.dist.is_main:
                        watch.enter("evaluating", self.step)
                        metrics.update(self.feed.evaluate(self.sampling_args))
                        self.show.print(f"eval at step {self.step}: reward {metrics['eval/reward']:.4f} "
                                        f"({cfg.eval_num_examples} examples)")
                    self._record_step(logger, groups, metrics)
                    if cfg.save_every and self.step % cfg.save_every == 0:
                        self._checkpoint()
        except KeyboardInterrupt:
            interrupted = True
            self.generator.cancel_pending()
            path = self._checkpoint(self._step_start, together=False)
            self.console.print(f"[yellow]interrupted at step {self.step}; checkpoint saved to {path}; "
                               f"continue with --resume[/yellow]")
        except RewardFunctionError as exc:
            # Nothing of this step was trained; keep what was, so a fixed environment can --resume.
            self.generator.cancel_pending()
            path = self._checkpoint(self._step_start, together=False)
            self.show.print(f"[red]stopped before step {self.step + 1}:[/red] {escape(str(exc))}")
            raise RewardFunctionError(f"{exc} (checkpoint {path}; continue with --resume)") from exc
        except ServerError as exc:
            # The inference server died or stopped serving our policy: keep everything trained so far.
            self.generator.cancel_pending()
            if self._step_start is None and self._unsynced is not None:  # the step trained; only its sync failed
                self.reward_history.append(self._unsynced["reward"])
                logger.log(self.step, {**self._unsynced, "sync/failed": 1.0})
            path = self._checkpoint(self._step_start, together=False)
            self.console.print(f"[red]stopped at step {self.step}: {exc}[/red]\ncheckpoint saved to {path}; "
                               "once the server is back, continue with --resume")
            raise ServerError(f"{exc} (stopped at step {self.step}; checkpoint {path}; continue with --resume)") from exc
        finally:
            self.stop.restore()
            logger.close()
            self.generator.close()
        if not interrupted:
            self._finish()
        return summarize(self.out, self.step, time.perf_counter() - t0, self.reward_history,
                         interrupted=interrupted, is_main=self.dist.is_main)

    def _record_step(self, logger: MetricsLogger, groups: list[list[RolloutResult]],
                     metrics: dict[str, float]) -> None:
        """A finished step: its reward kept, then its lines, warnings, metrics row and progress bar."""
        self.reward_history.append(metrics["reward"])
        self._last_groups = groups
        self.show.record(self.step, metrics, logger)

    def _finish(self) -> None:
        """A run that reached ``max_steps``: the last checkpoint, the final model, samples, curves."""
        self._checkpoint()
        if self.dist.is_main:
            self.sync.save_final(self.policy.served(), self.tokenizer, self.out / "final_model")
        self.dist.barrier()  # final_model exists on every rank's return
        self.show.finish(self._last_groups, self.step, self.out)
