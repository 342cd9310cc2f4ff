"""The GRPO training loop: generate → store → advantages → clipped loss (+KL) → step → sync.

Read top to bottom, `GRPOTrainer.train` is the whole algorithm:

1. a `BatchGenerator` turns ``prompts_per_step`` prompts into ``G`` scored rollouts each,
   one request per sample, against the inference server (by default the embedded engine
   in this process, sharing the model object so "weight sync" is a version bump);
2. groups go into the `ExperienceStore` (which can drop zero-variance groups, then the
   generator refills) and come out whole;
3. the server's token ids become a right-padded batch with a loss mask over sampled tokens
   only; advantages are group-relative (explicit group ids);
4. for ``num_iterations`` passes, micro-batches (a seeded shuffle, split into
   ``gradient_accumulation_steps``) compute the preset's loss; each micro-batch's loss is
   already its *share* of the full-batch loss, so gradients add up to the same value for
   any split; clip, step, schedule;
5. the server gets the new weights; metrics, evals and checkpoints follow.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import random
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from rich.markup import escape

from trainers.grpo.algo.advantages import GroupStats, get_advantage_fn, group_stats
from trainers.grpo.algo.algorithms import AlgorithmPreset, compute_loss, get_algorithm, rows_with_gradient
from trainers.grpo.algo.losses import LossNormalizer, expert_count, mask_truncated
from trainers.grpo.config import TrainConfig
from trainers.grpo.data.batch import TrainBatch, TrainRow, collate, expert_rows, row_from_result
from trainers.grpo.data.generator import BatchGenerator, RolloutBatch
from trainers.grpo.data.microbatch import micro_batches
from trainers.grpo.data.scoring import RewardFunctionError, ScoringFailures, merge_failures
from trainers.grpo.data.store import ExperienceStore
from trainers.grpo.dist.ranks import Dist
from trainers.grpo.learn.logprobs import completion_logps
from trainers.grpo.learn.step import global_normalizer
from trainers.grpo.run.checkpoint import (
    PER_RANK,
    checkpoint_path,
    latest_checkpoint,
    load_checkpoint,
    rank_state,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from trainers.grpo.run.reporting import MetricsLogger, plot_curves, read_metrics, samples_table
from trainers.grpo.run.watch import RunWatch
from trainers.grpo.sync.weight_sync import WeightSync, make_weight_sync
from verifiers.envs.loader import load_environment
from verifiers.errors import ConfigError, ServerError
from verifiers.types import RolloutResult

COLUMNS = ("result", "reward")
SERVER_ERRORS = {"ServerError", "ModelTimeoutError", "RolloutTimeoutError", "EmptyResponseError"}
"""Rollout errors that mean the inference server is gone or stuck, not that the environment is wrong."""


class _NothingToTrain(Exception):
    """Every group of a step had equal rewards, even after refills (``totals``: summed rewards, count)."""

    def __init__(self, totals: dict[str, float]) -> None:
        super().__init__("no trainable groups")
        self.totals = totals


@dataclass
class TrainSummary:
    steps: int
    wall_s: float
    reward_first: float
    reward_last: float
    output_dir: str
    interrupted: bool = False


class GRPOTrainer:
    def __init__(self, cfg: TrainConfig, *, console: Any = None) -> None:
        from rich.console import Console

        self.cfg = cfg
        self.console = console or Console()
        self.out = Path(cfg.output_dir)
        self.preset: AlgorithmPreset = get_algorithm(cfg.algorithm, **cfg.algorithm_overrides)
        if self.preset.off_policy is not None and cfg.temperature != 1.0:
            raise ConfigError(
                "off-policy correction compares the sampler's logprobs, which are the raw (temperature 1) "
                f"log-softmax, with the learner's at temperature={cfg.temperature}; use temperature = 1.0 "
                "with off_policy, or disable off_policy"
            )
        if self.preset.mix is not None and not cfg.expert_data:
            raise ConfigError("the 'mix' algorithm needs expert_data = 'path/to/expert.jsonl' (rows with 'messages')")
        self.step = 0
        self.version = 0
        self.dist = Dist()  # one process until `setup` joins a launched run
        self.ray: Any = None  # `RayRollouts` when the config has [ray]
        self._stop_requested = False
        self._committing = False

    # -- setup -----------------------------------------------------------------------------
    def _model_path(self) -> str:
        from verifiers.inference.tiny import TinyModelSpec, save_tiny_model

        path = self.cfg.model
        if path == "tiny":
            path = str(self.out / "base_model")
            with self.dist.main_first():  # rank 0 builds it, the others load what it wrote
                if self.dist.is_main and not (Path(path) / "config.json").is_file():
                    save_tiny_model(path, TinyModelSpec(**self.cfg.tiny_model.model_dump()))
            return path
        resolved = getattr(self, "_resolved_model", None)
        if resolved is None:  # a directory, or a Hugging Face id fetched into its cache (rank 0 first)
            from verifiers.inference.model_source import resolve_model

            with self.dist.main_first():
                resolved = str(resolve_model(path, log=self._print_main))
            self._resolved_model = resolved
        return resolved

    def _load_model(self) -> tuple[Any, Any]:
        from verifiers.inference.loading import load_model_and_tokenizer

        # float32 by default whatever the checkpoint holds: Adam updates of a 16-bit weight
        # round away unless they exceed half its last bit (see docs/training.md, "Precision").
        return load_model_and_tokenizer(self._model_path(), dtype=self.cfg.dtype)

    def _start_managed_servers(self) -> list[str] | None:
        """``[vllm]``: start the servers this run trains against (stopped in `_stop_servers`)."""
        if self.cfg.vllm is None:
            return None
        from verifiers.inference.vllm_server import VLLMServerSpec, start_servers

        v = self.cfg.vllm
        if v.cpu_cores is not None and len(v.cpu_cores) != v.num_servers:
            raise ConfigError(f"vllm.cpu_cores has {len(v.cpu_cores)} entries for {v.num_servers} servers")
        specs = [VLLMServerSpec(model_dir=self._model_path(), served_model_name=self.cfg.server_model_name,
                                kv_cache_gib=v.kv_cache_gib, cpu_cores=v.cpu_cores[i] if v.cpu_cores else None,
                                enable_lora=self.cfg.weight_sync == "lora", max_lora_rank=max(16, self.cfg.lora_r),
                                extra_args=list(v.extra_args))
                 for i in range(v.num_servers)]
        self.console.print(f"starting {v.num_servers} vLLM server(s) (logs: {self.out / 'vllm'})")
        self.servers = start_servers(specs, log_dir=self.out / "vllm", timeout_s=v.startup_timeout_s)
        urls = [s.base_url for s in self.servers]
        self.console.print("vLLM ready: " + ", ".join(urls))
        return urls

    def _stop_servers(self) -> None:
        for s in getattr(self, "servers", []):
            s.stop()
        self.servers = []

    def setup(self) -> None:
        cfg = self.cfg
        self._join_processes()
        self.out.mkdir(parents=True, exist_ok=True)
        if self.dist.is_main:
            cfg.save(self.out / "config.json")
        if cfg.torch_threads:
            torch.set_num_threads(cfg.torch_threads)
        random.seed(cfg.seed)
        torch.manual_seed(cfg.seed)
        model, self.tokenizer = self._load_model()
        model.eval()  # no dropout: the sampler and the learner must see the same function
        self.ref_model = None
        if self.preset.uses_reference and not cfg.lora:
            self.ref_model = copy.deepcopy(model).requires_grad_(False)
        if cfg.lora:
            from peft import get_peft_model

            from trainers.grpo.learn.lora import lora_config

            model = get_peft_model(model, lora_config(cfg, model))
        if cfg.gradient_checkpointing:  # the old name is deprecated in transformers 5
            enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
            enable()
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            self.params, lr=cfg.learning_rate, betas=(cfg.adam_beta1, cfg.adam_beta2), weight_decay=cfg.weight_decay
        )
        from accelerate import Accelerator
        from transformers import get_scheduler

        self.scheduler = get_scheduler(
            cfg.lr_scheduler, self.optimizer, num_warmup_steps=cfg.warmup_steps,
            num_training_steps=cfg.max_steps * cfg.num_iterations,
        )
        # Device placement and (under `accelerate launch`) DDP wrapping. Gradient accumulation is
        # ours: each micro-batch loss is already its share of the step loss, so no rescaling.
        # mixed_precision "no" even when an accelerate config says otherwise: accelerate's autocast
        # wrapper would also upcast every output to float32, i.e. the full [rows, tokens, vocab]
        # logits; the trainer applies its own autocast (`_autocast`) where it is wanted.
        self.accelerator = Accelerator(cpu=not torch.cuda.is_available(), mixed_precision="no",
                                       kwargs_handlers=self._ddp_kwargs())
        # The scheduler is not prepared: accelerate's wrapper would step it once per process at
        # every optimizer step (it assumes a batch per process); here it steps once per step.
        self.model, self.optimizer = self.accelerator.prepare(model, self.optimizer)
        model = self.accelerator.unwrap_model(self.model)
        self.device = self.accelerator.device
        if self.ref_model is not None:
            self.ref_model.to(self.device)
        urls = self._start_managed_servers()
        # Each rank's embedded engine samples with its own seed (seed + rank) where a request has none.
        sync_cfg = cfg if self.dist.is_main else cfg.model_copy(update={"seed": cfg.seed + self.dist.rank})
        self.sync: WeightSync = make_weight_sync(sync_cfg, model, self.tokenizer, self.out, urls,
                                                 log=self.console.print)
        env = load_environment(cfg.env_id, **cfg.env_args)
        self.env = env
        rows = self._training_rows(env)
        if len(rows) < cfg.prompts_per_step:
            raise ConfigError(
                f"the training split has {len(rows)} prompts, fewer than prompts_per_step={cfg.prompts_per_step}"
            )
        sampling = {"max_tokens": cfg.max_tokens, "temperature": cfg.temperature, "top_p": cfg.top_p,
                    "logprobs": True, "extra_body": {"return_token_ids": True}}
        if cfg.top_k > 0:
            sampling["extra_body"]["top_k"] = cfg.top_k
        if cfg.min_p > 0:
            sampling["extra_body"]["min_p"] = cfg.min_p
        self.sampling_args = sampling
        store_kwargs = {"consumers": ("trainer",), "columns": COLUMNS, "max_staleness": cfg.max_staleness,
                        "filter_zero_std": self.preset.filter_zero_std_groups, "seed": cfg.seed}
        if cfg.ray is not None:  # rollouts on Ray workers, the store a Ray actor (trainers/grpo/ray/rollouts.py)
            self.ray = self._start_ray(env, rows, sampling, store_kwargs)
            self.generator, self.store = self.ray.generator, self.ray.store
        else:
            self.generator = BatchGenerator(
                env, rows, make_client=self.sync.make_client, model_name=self.sync.model_name, sampling_args=sampling,
                prompts_per_step=cfg.prompts_per_step, num_generations=cfg.num_generations, seed=cfg.seed,
                max_concurrent=cfg.max_concurrent, rollout_timeout_s=cfg.rollout_timeout_s,
                timeout_s=cfg.generation_timeout_s, rank=self.dist.rank, world_size=self.dist.world_size,
            )
            self.store = ExperienceStore(**store_kwargs)
        self.expert: list[TrainRow] = []
        if self.preset.mix is not None:
            self.expert = self._load_expert()
        self.warmup_rows: list[TrainRow] = []
        if cfg.sft_warmup_steps:
            self.warmup_rows = self._load_expert(cfg.sft_warmup_tokens)
        self.pending: list[int] = []
        self.reward_history: list[float] = []
        self.watch: RunWatch | None = None

    def _join_processes(self) -> None:
        """Under ``accelerate launch``: join the other processes; only rank 0 prints and writes files.

        A run against an external server is refused with several processes: its weight sync
        (save + reload, NCCL broadcast) is one writer's job and is not coordinated across ranks.
        """
        cfg = self.cfg
        self.dist = Dist.start(cpu=not torch.cuda.is_available())
        if not self.dist.active:
            return
        if cfg.vllm is not None or cfg.base_urls:
            raise ConfigError(
                f"{self.dist.world_size} training processes with an external inference server (base_url / [vllm]) "
                "are not supported: use the embedded engine (no base_url) under accelerate launch, or train in one "
                "process against the server"
            )
        if cfg.prompts_per_step % self.dist.world_size:
            raise ConfigError(
                f"prompts_per_step={cfg.prompts_per_step} is the global number of prompts per step and must be "
                f"divisible by the number of processes ({self.dist.world_size}): each trains whole groups"
            )
        if not self.dist.is_main:
            self.console.quiet = True

    def _start_ray(self, env: Any, rows: list[dict[str, Any]], sampling: dict[str, Any],
                   store_kwargs: dict[str, Any]) -> Any:
        """``[ray]``: serve the embedded engine to Ray rollout workers; the store becomes an actor."""
        from trainers.grpo.ray.rollouts import start_ray_rollouts
        from trainers.grpo.sync.weight_sync import SharedEngineSync

        if self.dist.active:
            raise ConfigError(f"[ray] with {self.dist.world_size} training processes is not supported yet: "
                              "train in one process with Ray rollout workers, or drop [ray] under accelerate launch")
        if not isinstance(self.sync, SharedEngineSync):
            raise ConfigError("[ray] serves the trainer's embedded engine to the rollout workers: "
                              "remove base_url / [vllm] from the config, or drop [ray]")
        return start_ray_rollouts(self.cfg, env, rows, self.sync.engine, sampling, store_kwargs=store_kwargs)

    def _ddp_kwargs(self) -> list[Any]:
        """DDP without buffer broadcasts: each one is a collective inside every forward pass, and
        ranks run different numbers of forwards (micro-batches follow their own rows), which would
        deadlock; the buffers (rotary tables) are not trained and are equal on every rank anyway."""
        import warnings

        from accelerate.utils import DistributedDataParallelKwargs

        # torch >= 2.10 suggests forward_sync_buffers, which accelerate cannot pass on yet
        warnings.filterwarnings("ignore", message="`broadcast_buffers` is deprecated", category=FutureWarning)
        return [DistributedDataParallelKwargs(broadcast_buffers=False)]

    def _training_rows(self, env: Any) -> list[dict[str, Any]]:
        data = env.get_dataset()
        if self.cfg.max_prompt_len is None:
            return list(data.rows)
        from verifiers.data.filtering import filter_overlong

        kept, stats = filter_overlong(data.hf, self.tokenizer, self.cfg.max_prompt_len)
        self.console.print(
            f"overlong filter: kept {stats.kept}/{stats.total} prompts "
            f"({stats.overlong} too long, {stats.template_failures} failed the chat template)"
        )
        # The HF view stores ``info`` as JSON text (Arrow cannot hold differently-keyed dicts)
        return [{**r, "info": json.loads(r["info"])} if isinstance(r.get("info"), str) else r for r in kept.to_list()]

    def _load_expert(self, tokens: Literal["all", "content"] = "all") -> list[TrainRow]:
        path = Path(self.cfg.expert_data or "")
        if not path.is_file():
            raise ConfigError(f"expert_data {path} does not exist")
        convs, tools = [], []
        for i, line in enumerate(path.read_text().splitlines()):
            if not line.strip():
                continue
            row = json.loads(line)
            if "messages" not in row:
                raise ConfigError(f"{path}:{i + 1} has no 'messages' list (chat rows are needed for SFT)")
            convs.append(row["messages"])
            tools.append(row.get("tools"))  # a tool-using episode is rendered with its tool schemas
        rows = expert_rows(self.tokenizer, convs, self.cfg.max_seq_len, tools=tools, tokens=tokens)
        if not rows:
            what = "assistant turns" if tokens == "all" else "assistant content (text or tool-call arguments)"
            raise ConfigError(f"{path} has no {what} to train on")
        return rows

    # -- data ------------------------------------------------------------------------------
    def _submit(self) -> None:
        self.pending.append(self.generator.submit(self.version))

    def _take_batch(self) -> tuple[list[list[RolloutResult]], list[int], dict[str, float]]:
        """Whole groups for one step, refilling when the store filtered or evicted some."""
        cfg = self.cfg
        self._filtered_rewards: list[float] = []
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
                    if self.dist.any_rank(got is None) and self.step > 0:
                        # Equal rewards in every group after training started: usually a solved task
                        # (every sample scores the maximum). Nothing to learn from; not an error.
                        raise _NothingToTrain(self.dist.sum_values(
                            {"r": sum(self._filtered_rewards), "n": len(self._filtered_rewards)}))
                    if self.dist.any_rank(got is None):
                        raise ConfigError(
                            "no trainable groups after refills: every group had equal rewards (or went stale); "
                            "raise max_refills, lower filtering, or check the reward functions"
                        )
                    assert got is not None
                    break
                self._submit()
                submitted += 1
            batch = self.generator.get(self.pending.pop(0))
            info["gen_s"] += batch.seconds
            self._store_batch(batch)
        while len(self.pending) < cfg.num_batches_ahead:
            self._submit()
        info["refills"] = float(max(0, submitted - regular))
        groups: dict[int, list[RolloutResult]] = {}
        for gi, res in zip(got.group_index, got.columns["result"], strict=True):
            groups.setdefault(gi, []).append(res)
        return list(groups.values()), list(got.policy_versions), info

    def _store_batch(self, batch: RolloutBatch) -> None:
        reports = getattr(batch, "reports", None)
        if reports is not None:  # Ray workers already put these groups into the store actor
            self._check_scoring(merge_failures([r.failures for r in reports]))
            for rep in reports:
                if rep.status == "filtered":
                    self._filtered_rewards.extend(rep.rewards)
            return
        self._check_scoring(ScoringFailures.of(batch.results))
        by_group: dict[int, list[RolloutResult]] = {}
        for r in batch.results:
            by_group.setdefault(r.group_id, []).append(r)
        for gid, rs in by_group.items():
            rs.sort(key=lambda r: r.rollout_index)
            status = self.store.put(gid, {"result": rs, "reward": [r.reward for r in rs]},
                                    policy_version=batch.policy_version)
            if status == "filtered":
                self._filtered_rewards.extend(r.reward for r in rs)

    def _check_scoring(self, failures: ScoringFailures) -> None:
        """Print the first message of each new scoring error; stop when a reward function fails on
        (by default) every rollout of a generated batch: the step would train on rewards of 0."""
        if self.dist.is_main and self.watch is not None:
            self.watch.errors(failures, self.step + 1)
        share = self.cfg.reward_error_stop_share
        worst = max(failures.per_function.items(), key=lambda kv: kv[1], default=(None, 0))
        broken = share is not None and failures.rollouts > 0 and worst[1] >= share * failures.rollouts
        if self.dist.any_rank(broken):
            where = worst[0] or "a reward function (on another process)"
            message = next((f"{kind}: {m}" for (w, kind), m in failures.first.items() if w == worst[0]), "")
            raise RewardFunctionError(
                f"{where} failed on {worst[1]}/{failures.rollouts} rollouts of step {self.step + 1} ({message}). "
                "Training on it would learn nothing. Fix the function (vf.testing.check_environment(env) shows "
                "every reward function's errors on a few scripted rollouts), or set reward_error_stop_share = "
                "null to train anyway."
            )

    # -- one optimizer step ----------------------------------------------------------------
    def _build(self, groups: list[list[RolloutResult]]) -> tuple[TrainBatch, dict[str, float]]:
        cfg = self.cfg
        rows: list[TrainRow] = []
        for g, rs in enumerate(groups):
            for r in rs:
                row = row_from_result(r, g, cfg.max_seq_len, cfg.overlong)
                if row is not None:
                    rows.append(row)
        all_results = [r for rs in groups for r in rs]
        if not rows:
            errors = sorted({r.error.type for r in all_results if r.error})
            if errors and all(r.error is not None for r in all_results) and set(errors) <= SERVER_ERRORS:
                first = next(r.error for r in all_results if r.error is not None)
                raise ServerError(f"every rollout of step {self.step + 1} failed ({', '.join(errors)}): "
                                  f"{first.message}")
            raise ConfigError(
                "no rollout in this batch has token data to train on"
                + (f" (errors: {', '.join(errors)})" if errors else "")
                + "; the server must return token ids (return_token_ids) and logprobs"
            )
        if self.expert:
            assert self.preset.mix is not None
            # The expert share is of the whole batch (ANCHORS: 0.25 of 256 = 64 expert + 192 usual).
            ratio = self.preset.mix.expert_ratio
            k = expert_count(ratio, round(len(rows) / (1.0 - ratio)))
            # rank 0 draws what one process would; other ranks draw other expert rows
            rng = random.Random(cfg.seed * 7919 + self.step + 1_000_003 * self.dist.rank)
            rows += [self.expert[rng.randrange(len(self.expert))] for _ in range(k)]
        batch = collate(rows, self.tokenizer.pad_token_id or 0).to(self.device)
        rl = ~batch.is_expert
        adv = torch.zeros(len(batch), device=batch.rewards.device)
        adv[rl], stats = self._advantages(batch.rewards[rl], batch.group_ids[rl])
        batch.advantages = adv
        return batch, self._batch_metrics(all_results, rows, batch, stats)

    def _advantages(self, rewards: torch.Tensor, group_ids: torch.Tensor) -> tuple[torch.Tensor, GroupStats]:
        """This rank's advantages and the group metrics, computed over every rank's rows.

        Groups are whole on each rank, but a batch-level scale (``scale = "batch"``) and the
        metrics need the global batch: with it, they equal what one process computes.
        """
        all_rewards, all_groups, offset = self.dist.gather_groups(rewards, group_ids)
        adv_fn = get_advantage_fn(self.preset.advantage)
        adv = adv_fn(all_rewards, all_groups, scale=self.preset.scale, eps=self.preset.eps)
        return adv[offset : offset + len(rewards)], group_stats(all_rewards, all_groups)

    def _batch_metrics(self, results: list[RolloutResult], rows: list[TrainRow], batch: TrainBatch,
                       stats: GroupStats) -> dict[str, float]:
        """The step's rollout metrics over the global batch (sums and counts added over ranks)."""
        rl = ~batch.is_expert
        lengths = [sum(r.loss_mask) for r in rows if not r.is_expert]
        local = {
            "reward": sum(r.reward for r in results), "n/results": len(results),
            "lengths": sum(lengths), "n/lengths": len(lengths),
            "clipped": float(batch.is_truncated[rl].sum()), "n/rl": float(rl.sum()),
            "errors": sum(1 for r in results if r.error),
            "scoring_errors": sum(1 for r in results if r.scoring_errors),
        }
        for r in results:
            for k, v in r.metrics.items():
                local[f"rewards/{k}"] = local.get(f"rewards/{k}", 0.0) + v
                local[f"n/rewards/{k}"] = local.get(f"n/rewards/{k}", 0) + 1
        tot = self.dist.sum_values(local)
        metrics: dict[str, float] = {
            "reward": tot["reward"] / tot["n/results"],
            "reward_std": float(stats.reward_std),
            "frac_reward_zero_std": float(stats.frac_reward_zero_std),
            "completions/mean_length": tot["lengths"] / tot["n/lengths"],
            "completions/max_length": self.dist.max_values({"m": float(max(lengths))})["m"],
            "completions/clipped_ratio": tot["clipped"] / tot["n/rl"],
            "rollouts/errors": tot["errors"],
            "rollouts/scoring_errors": tot["scoring_errors"],
            "rollouts/trained": tot["n/rl"],
        }
        for k in sorted(tot):
            if k.startswith("rewards/"):
                metrics[k] = tot[k] / tot[f"n/{k}"]
        return metrics

    def _logps_no_grad(self, model: Any, batch: TrainBatch, chunks: int) -> torch.Tensor:
        out = torch.zeros_like(batch.sampler_logp)
        device = batch.input_ids.device
        if self.cfg.micro_batch_tokens is None:
            parts = list(torch.arange(len(batch), device=device).chunk(chunks))
        else:  # by the token budget; unshuffled, since the values do not depend on the split
            parts = [p.to(device) for p in micro_batches(batch, self.cfg.micro_batch_tokens)]
        with torch.no_grad():
            for part in parts:
                sub = batch.select(part)
                lp, _ = completion_logps(model, sub, self.cfg.temperature, with_entropy=False,
                                         chunk_tokens=self.cfg.logprob_chunk_tokens)
                out[part, : lp.shape[1]] = lp
        return out

    @contextlib.contextmanager
    def _reference(self) -> Iterator[Any]:
        if self.ref_model is not None:
            yield self.ref_model
        else:  # LoRA: the base model is the policy with its adapters switched off
            # An embedded engine decoding ahead shares this model: it waits while the adapters are
            # off, or its samples would come from the base model tagged with the policy's version.
            with self.sync.updating(), self.accelerator.unwrap_model(self.model).disable_adapter():
                yield self.model

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        """bf16 autocast of the forward passes when ``mixed_precision = "bf16"`` (weights stay float32)."""
        if self.cfg.mixed_precision != "bf16":
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)

    def _optimize(self, batch: TrainBatch) -> dict[str, float]:
        """One optimizer step (or ``num_iterations``) on ``batch``, under the configured precision."""
        with self._autocast():
            return self._train_on(batch)

    def _train_on(self, batch: TrainBatch) -> dict[str, float]:
        cfg, preset = self.cfg, self.preset
        mask = batch.loss_mask
        if preset.mask_truncated_completions:
            mask = mask_truncated(mask, batch.is_truncated)
        batch.loss_mask = mask
        # Several processes: every rank divides by the counts of the union batch (see `_backward`).
        normalizer = global_normalizer(
            self.dist,
            LossNormalizer.from_batch(mask, is_expert=batch.is_expert, max_completion_len=cfg.max_tokens))
        chunks = cfg.gradient_accumulation_steps
        rl_tokens = normalizer.num_active_tokens
        skipped, idle = 0, False  # idle: no row left, the step is the optimizer's on a zero gradient
        if cfg.skip_zero_advantage and not self.dist.active:  # DDP needs the same backward calls on every rank
            assert batch.advantages is not None
            live = rows_with_gradient(preset, batch.advantages, batch.is_expert)
            skipped = int((~live).sum())
            if skipped and bool(live.any()):
                rl_tokens = int(batch.loss_mask[live & ~batch.is_expert].sum())
                batch = batch.select(live.nonzero()[:, 0])
            elif skipped:
                rl_tokens, idle = 0, True
        old = self._logps_no_grad(self.model, batch, chunks) if cfg.num_iterations > 1 and not idle else None
        ref = None
        if preset.uses_reference:
            with self._reference() as ref_model:
                ref = self._logps_no_grad(ref_model, batch, chunks)
        sums: dict[str, float] = {}
        grad_norms = []
        paused = contextlib.ExitStack()
        if cfg.gradient_checkpointing:
            # Checkpointing only acts in train mode, where transformers also switches the KV cache
            # off; an embedded engine decoding this same model meanwhile would break, so it waits.
            paused.enter_context(self.sync.updating())
            self.model.train()
        try:
            for it in range(cfg.num_iterations):
                gen = torch.Generator().manual_seed(cfg.seed * 100_003 + self.step * 101 + it)
                # Seeded on the CPU (the same order on every device), used where the batch lives:
                # index_select refuses a CPU index for CUDA tensors.
                if idle:
                    parts = []
                    for p in self.params:
                        p.grad = torch.zeros_like(p)
                elif cfg.micro_batch_tokens is None:
                    perm = torch.randperm(len(batch), generator=gen).to(batch.input_ids.device)
                    parts = list(perm.chunk(chunks))
                else:  # by the token budget, rows of similar length together, groups whole
                    plan = micro_batches(batch, cfg.micro_batch_tokens, generator=gen)
                    parts = [p.to(batch.input_ids.device) for p in plan]
                for part in parts:
                    sub = batch.select(part)
                    width = sub.loss_mask.shape[1]
                    logp, entropy = completion_logps(
                        self.model, sub, cfg.temperature, entropy_grad=preset.entropy_coef != 0,
                        chunk_tokens=cfg.logprob_chunk_tokens, share_prompts=self._share_prompts(),
                    )
                    loss, m = compute_loss(
                        preset,
                        logp=logp,
                        old_logp=None if old is None else old[part, :width],
                        ref_logp=None if ref is None else ref[part, :width],
                        sampler_logp=sub.sampler_logp if preset.off_policy is not None else None,
                        advantages=sub.advantages,
                        loss_mask=sub.loss_mask,
                        is_expert=sub.is_expert if self.expert else None,
                        entropy=entropy,
                        normalizer=normalizer,
                    )
                    self._backward(loss, last=part is parts[-1])
                    for k, v in m.items():
                        sums[k] = sums.get(k, 0.0) + float(v) / cfg.num_iterations
                if cfg.max_grad_norm is not None:
                    gn = self.accelerator.clip_grad_norm_(self.params, cfg.max_grad_norm)
                else:
                    gn = torch.linalg.vector_norm(
                        torch.stack([p.grad.norm() for p in self.params if p.grad is not None])
                    )
                grad_norms.append(float(gn))
                self._committing = True  # from here on the step is finished, not abandoned
                with self.sync.updating():
                    self.optimizer.step()
                self.scheduler.step()
                self.optimizer.zero_grad(set_to_none=True)
        finally:
            if cfg.gradient_checkpointing:
                self.model.eval()
            paused.close()
        sums["grad_norm"] = sum(grad_norms) / len(grad_norms)
        if skipped:
            # compute_loss divided the entropy by every RL token of the step; report the mean over those trained
            entropy = sums.pop("entropy", None)
            if entropy is not None and rl_tokens:
                sums["entropy"] = entropy * normalizer.num_active_tokens / rl_tokens
        if idle:  # every row had advantage 0: the loss is exactly 0 (and no entropy was measured)
            sums["loss"] = 0.0
        sums["rows_skipped"] = float(skipped)
        sums["learning_rate"] = float(self.scheduler.get_last_lr()[0])
        return sums

    def _backward(self, loss: torch.Tensor, *, last: bool) -> None:
        """Backward of one micro-batch; under DDP gradients are all-reduced on the ``last`` one only.

        Each rank's loss is its share of the global loss (global normaliser), and DDP averages
        gradients over ranks, so the loss is scaled by the world size: the reduced gradient is
        then the one a single process gets on the union batch.
        """
        if self.dist.active:
            loss = loss * self.dist.world_size
        with contextlib.nullcontext() if last else self.accelerator.no_sync(self.model):
            self.accelerator.backward(loss)

    def _sft_warmup(self) -> None:
        """`run_sft_warmup` on this run's model and optimizer, then the weights go to the server."""
        from trainers.grpo.learn.warmup import run_sft_warmup

        cfg = self.cfg
        what = "content" if cfg.sft_warmup_tokens == "content" else "all assistant tokens"
        self._print_main(f"sft warm-up: {cfg.sft_warmup_steps} steps on {len(self.warmup_rows)} expert rows ({what})")
        summary = run_sft_warmup(
            model=self.model, optimizer=self.optimizer, params=self.params, rows=self.warmup_rows,
            steps=cfg.sft_warmup_steps, batch_size=cfg.sft_warmup_batch_size,
            learning_rate=cfg.sft_warmup_learning_rate or cfg.learning_rate, max_grad_norm=cfg.max_grad_norm,
            pad_id=self.tokenizer.pad_token_id or 0, device=self.device, seed=cfg.seed + self.dist.rank,
            # each rank's loss is the mean over its own rows: DDP's average over ranks is then the mean
            backward=lambda loss: self._backward(loss / self.dist.world_size if self.dist.active else loss, last=True),
            clip=self.accelerator.clip_grad_norm_,
            updating=self.sync.updating, log_path=self.out / "warmup.jsonl" if self.dist.is_main else None,
            print_line=self._print_main, chunk_tokens=cfg.logprob_chunk_tokens,
        )
        self.sync.after_step(self.version)  # a server of its own (vLLM, vf-serve) gets the warmed-up weights
        self._print_main(f"sft warm-up done in {summary['warmup/time_s']:.1f}s: loss "
                         f"{summary['warmup/loss_first']:.4f} -> {summary['warmup/loss_last']:.4f}")

    def _share_prompts(self) -> bool:
        """Whether the learner may run each group's prompt once (not with gradient checkpointing).

        The flag lives on the transformers model, not on a DDP wrapper, so it is read from the
        unwrapped module (``completion_logps`` only sees the wrapper it is given).
        """
        lm = self.accelerator.unwrap_model(self.model)
        flags = ("is_activation_checkpointing", "is_gradient_checkpointing")
        return not any(bool(getattr(lm, f, False)) for f in flags)

    def _global_train_metrics(self, metrics: dict[str, float]) -> dict[str, float]:
        """The learner's metrics over every rank: loss and the token metrics are each rank's
        contributions to the global value (global normaliser), so they add up; the gradient norm
        (taken after the all-reduce) and the learning rate are the same on every rank."""
        same = {k: metrics[k] for k in ("grad_norm", "learning_rate") if k in metrics}
        summed = self.dist.sum_values({k: v for k, v in metrics.items() if k not in same})
        return {**summed, **same}

    # -- loop ------------------------------------------------------------------------------
    def _data_state(self) -> dict[str, Any]:
        """Everything a checkpoint holds besides weights, optimizer and scheduler."""
        return {
            "step": self.step,
            "version": self.version,
            "generator": self.generator.state_dict(),
            "store": self.store.state_dict(),
            "rng": rng_state(),
            "engine_rng": self.sync.rng_state(),
            "reward_history": list(self.reward_history),
        }

    def _checkpoint(self, data_state: dict[str, Any] | None = None, *, together: bool = True) -> Path:
        """``data_state``: the one taken at the start of an unfinished step (see `train`).

        Rank 0 writes it. ``together``: every rank is at this point (a regular save), so their
        own parts (store, RNGs) are gathered into it and they wait until it exists. The stop
        and error paths pass False: ranks may get there at different moments, so no collective
        is safe; rank 0 saves alone, and the other ranks resume from their seeds.
        """
        state = data_state or self._data_state()
        own = {k: state[k] for k in PER_RANK}
        ranks = self.dist.gather(own) if together else [own]
        root = self.out / "checkpoints"
        path = checkpoint_path(root, self.step)
        if self.dist.is_main:
            payload = {
                **state,
                "ranks": ranks,
                "model": self.accelerator.unwrap_model(self.model).state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "config": self.cfg.model_dump(mode="json"),
            }
            path = save_checkpoint(root, self.step, payload, keep=self.cfg.keep_checkpoints)
        if together:
            self.dist.barrier()
        return path

    def _resume(self, where: str | bool) -> bool:
        """Load the checkpoint; False when there is none (the run starts fresh)."""
        path = latest_checkpoint(self.out / "checkpoints") if where is True else Path(str(where))
        if path is None:
            self.console.print("[yellow]no checkpoint to resume from; starting fresh[/yellow]")
            return False
        state = load_checkpoint(path)
        self.accelerator.unwrap_model(self.model).load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.generator.load_state_dict(state["generator"])  # the global prompt order: the same on every rank
        own = rank_state(state, self.dist.rank)
        if own is not None:  # None: the saving run had fewer processes; this rank keeps its seeds
            self.store.load_state_dict(own["store"])
            set_rng_state(own["rng"])
            self.sync.set_rng_state(own["engine_rng"])
        self.step = int(state["step"])
        self.version = int(state["version"])
        self.sync.on_resume(self.version)
        self.reward_history = list(state.get("reward_history", []))
        self.console.print(f"resumed from {path} at step {self.step}")
        return True

    def _print_main(self, text: str) -> None:
        """Rank 0 prints; lines are not wrapped (a log file has no width)."""
        if self.dist.is_main:
            self.console.print(text, soft_wrap=True)

    def _banner_facts(self) -> dict[str, Any]:
        """One line at start-up: what is training, where, on what (visible in any log)."""
        model = self.accelerator.unwrap_model(self.model)
        total = sum(p.numel() for p in model.parameters())
        trainable = sum(p.numel() for p in self.params)
        dtype = next(model.parameters()).dtype
        precision = str(dtype).removeprefix("torch.")
        if self.cfg.mixed_precision != "no":
            precision += f" + {self.cfg.mixed_precision} autocast"
        return {
            "device": str(self.device) + (f" x{self.dist.world_size} processes" if self.dist.world_size > 1 else ""),
            "dtype": precision,
            "parameters": f"{total:,}" + (f" ({trainable:,} trained)" if trainable != total else ""),
            "environment": f"{self.cfg.env_id} ({len(self.generator.rows)} training prompts)",
            "algorithm": self.cfg.algorithm,
            "steps": f"{self.step}->{self.cfg.max_steps}",
            "output": str(self.out),
        }

    def _samples(self, groups: list[list[RolloutResult]]) -> list[tuple[str, str, float]]:
        rows = []
        for rs in groups[: self.cfg.num_sample_completions]:
            r = rs[0]
            prompt = r.prompt if isinstance(r.prompt, str) else str((r.prompt[-1] or {}).get("content", ""))
            comp = r.completion if isinstance(r.completion, str) else "".join(
                str(m.get("content") or "") for m in r.completion
            )
            rows.append((prompt, comp, r.reward))
        return rows

    def _evaluate(self) -> dict[str, float]:
        out = self.generator.evaluate(self.cfg.eval_num_examples, self.env.merge_sampling_args(self.sampling_args))
        rewards = list(out.reward)
        metrics = {"eval/reward": sum(rewards) / max(len(rewards), 1)}
        for k, vs in (out.metrics or {}).items():
            if vs:
                metrics[f"eval/rewards/{k}"] = sum(vs) / len(vs)
        return metrics

    def train(self, resume: str | bool = False) -> TrainSummary:
        try:
            return self._train(resume)
        finally:
            # Whatever ended the run: the sync's resources (a weight copy in /dev/shm, an NCCL
            # group, the engine thread) are released and managed vLLM servers do not outlive it.
            ray_run = getattr(self, "ray", None)
            if ray_run is not None:  # workers, store actor, the engine's HTTP server; Ray if we started it
                with contextlib.suppress(Exception):
                    ray_run.close()
            sync = getattr(self, "sync", None)
            if sync is not None:
                with contextlib.suppress(Exception):
                    sync.close()
            self._stop_servers()
            self.dist.close()

    def _train(self, resume: str | bool) -> TrainSummary:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        cfg = self.cfg
        self.setup()
        t0 = time.perf_counter()  # the run's wall time includes an SFT warm-up
        if not (resume and self._resume(resume)):
            self.sync.on_start(self.version)
            if cfg.sft_warmup_steps and self.step == 0:
                try:
                    self._sft_warmup()
                except BaseException:  # Ctrl-C included: nothing to save yet (a new run warms up again)
                    self.generator.close()
                    raise
        logger = MetricsLogger(self.out, cfg.report_to, run_name=self.out.name, config=cfg.model_dump(mode="json"),
                               resume_step=self.step if resume else None, enabled=self.dist.is_main)
        interrupted = False
        self._stop_requested = False
        self._committing = False  # the weights of the step in progress have been updated
        step_start: dict[str, Any] | None = None  # data state at the start of the step in progress
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

        def on_term(signum: int, frame: Any) -> None:
            # Stop now. A step whose weights are not updated yet is abandoned (the checkpoint
            # holds the state it started from); one already updating is finished first.
            self._stop_requested = True
            if not self._committing:
                raise KeyboardInterrupt

        def on_int(signum: int, frame: Any) -> None:
            # The first Ctrl-C stops at the next step boundary, where the checkpoint is exact
            # (a resumed run then equals an uninterrupted one); a second one stops at once.
            if self._stop_requested:
                on_term(signum, frame)
                return
            self._stop_requested = True
            self.console.print("[yellow]Ctrl-C: stopping after this step (press again to stop now)[/yellow]")

        with contextlib.suppress(ValueError):  # only the main thread may install handlers
            signal.signal(signal.SIGTERM, on_term)
            signal.signal(signal.SIGINT, on_int)
        progress = Progress(TextColumn(f"[bold]{cfg.algorithm}"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), TextColumn("{task.fields[info]}"), console=self.console,
                            disable=not cfg.progress or not self.dist.is_main)
        self.watch = RunWatch(
            self._print_main, plain=not (cfg.progress and self.console.is_terminal), max_steps=cfg.max_steps,
            start_step=self.step, every_steps=cfg.log_lines_every, every_s=cfg.log_lines_every_s,
            degenerate_steps=cfg.degenerate_warn_steps or 10**9,
            masks_truncated=self.preset.mask_truncated_completions, filters_groups=self.preset.filter_zero_std_groups,
        )
        self.watch.banner(self._banner_facts())
        from verifiers.inference.devices import unused_gpu_note

        note = unused_gpu_note(str(self.device), "vf-train trains on the GPU whenever torch can use one")
        if note:
            self._print_main(note)
        last_groups: list[list[RolloutResult]] = []
        unsynced: dict[str, float] | None = None
        try:
            with progress:
                task = progress.add_task("train", total=cfg.max_steps, completed=self.step, info="")
                while self.step < cfg.max_steps:
                    if self.dist.any_rank(self._stop_requested):  # all ranks stop at the same step
                        raise KeyboardInterrupt
                    step_start = self._data_state()
                    t_step = time.perf_counter()
                    try:
                        groups, versions, info = self._take_batch()
                    except _NothingToTrain as nothing:
                        # Logged as a step without an update, so the curve shows it and the run goes on.
                        self.step += 1
                        step_start = None
                        skipped = {"reward": nothing.totals["r"] / max(nothing.totals["n"], 1.0),
                                   "skipped": 1.0, "frac_reward_zero_std": 1.0,
                                   "policy_version": float(self.version),
                                   "time/step_s": time.perf_counter() - t_step}
                        self.reward_history.append(skipped["reward"])
                        self._print_main(f"step {self.step}: every group had equal rewards after "
                                         f"{cfg.max_refills} refills (mean {skipped['reward']:.3f}); no update")
                        logger.log(self.step, skipped)
                        progress.update(task, completed=self.step, info=f"reward {skipped['reward']:.3f} (skipped)")
                        continue
                    batch, metrics = self._build(groups)
                    t_train = time.perf_counter()
                    metrics.update(self._global_train_metrics(self._optimize(batch)))
                    self.version += 1
                    self.step += 1
                    self.store.set_policy_version(self.version)
                    step_start = None  # the step is complete: a checkpoint from here on holds it
                    unsynced = metrics  # logged by the handler below if the sync fails
                    self.sync.after_step(self.version)
                    unsynced = None
                    metrics.update(getattr(self.sync, "last", {}))
                    self._committing = False
                    metrics["staleness"] = float(max(0, self.version - 1 - min(versions)))
                    metrics["policy_version"] = float(self.version)
                    metrics["time/generation_s"] = info["gen_s"]
                    metrics["time/train_s"] = time.perf_counter() - t_train
                    metrics["time/step_s"] = time.perf_counter() - t_step
                    metrics["refills"] = info["refills"]
                    if cfg.ray is not None:  # groups rerun because their worker died (cumulative)
                        metrics["ray/retried_groups"] = float(self.generator.retried_groups)
                    if cfg.eval_every and self.step % cfg.eval_every == 0 and self.dist.is_main:
                        metrics.update(self._evaluate())
                        self._print_main(f"eval at step {self.step}: reward {metrics['eval/reward']:.4f} "
                                         f"({cfg.eval_num_examples} examples)")
                    self.watch.step(self.step, metrics)
                    self.reward_history.append(metrics["reward"])
                    last_groups = groups
                    # A step with an evaluation is always logged: its eval/* values are not in any other row.
                    if self.step % cfg.log_every == 0 or self.step == cfg.max_steps or "eval/reward" in metrics:
                        logger.log(self.step, metrics)
                    progress.update(task, completed=self.step,
                                    info=f"reward {metrics['reward']:.3f} loss {metrics.get('loss', 0.0):+.4f}")
                    if cfg.save_every and self.step % cfg.save_every == 0:
                        self._checkpoint()
        except KeyboardInterrupt:
            interrupted = True
            self.generator.cancel_pending()
            path = self._checkpoint(step_start, together=False)
            self.console.print(f"[yellow]interrupted at step {self.step}; checkpoint saved to {path}; "
                               f"continue with --resume[/yellow]")
        except RewardFunctionError as exc:
            # Nothing of this step was trained; keep what was, so a fixed environment can --resume.
            self.generator.cancel_pending()
            path = self._checkpoint(step_start, together=False)
            self._print_main(f"[red]stopped before step {self.step + 1}:[/red] {escape(str(exc))}")
            raise RewardFunctionError(f"{exc} (checkpoint {path}; continue with --resume)") from exc
        except ServerError as exc:
            # The inference server died or stopped serving our policy: keep everything trained so far.
            self.generator.cancel_pending()
            if step_start is None and unsynced is not None:  # the step trained; only its sync failed
                self.reward_history.append(unsynced["reward"])
                logger.log(self.step, {**unsynced, "sync/failed": 1.0})
            path = self._checkpoint(step_start, together=False)
            self.console.print(f"[red]stopped at step {self.step}: {exc}[/red]")
            self.console.print(f"checkpoint saved to {path}; once the server is back, continue with --resume")
            raise ServerError(f"{exc} (stopped at step {self.step}; checkpoint {path}; continue with --resume)") from exc
        finally:
            with contextlib.suppress(ValueError):
                for sig, handler in previous.items():
                    signal.signal(sig, handler)
            logger.close()
            self.generator.close()
        if not interrupted:
            self._checkpoint()
            if self.dist.is_main:
                self.sync.save_final(self.accelerator.unwrap_model(self.model), self.tokenizer, self.out / "final_model")
            self.dist.barrier()  # final_model exists on every rank's return
            if last_groups and cfg.num_sample_completions and self.dist.is_main:
                self.console.print(samples_table(self._samples(last_groups), f"samples at step {self.step}"))
            if cfg.plot and self.dist.is_main:
                png = plot_curves(self.out / "metrics.jsonl", self.out / "curves.png")
                if png is not None:
                    self.console.print(f"curves: {png}")
        wall = time.perf_counter() - t0
        logged = read_metrics(self.out / "metrics.jsonl") if self.dist.is_main else []  # rank 0 writes it
        hist = [r["reward"] for r in logged if "reward" in r] or self.reward_history
        k = max(1, math.ceil(len(hist) * 0.1))
        return TrainSummary(
            steps=self.step, wall_s=wall,
            reward_first=sum(hist[:k]) / k if hist else float("nan"),
            reward_last=sum(hist[-k:]) / k if hist else float("nan"),
            output_dir=str(self.out), interrupted=interrupted,
        )
