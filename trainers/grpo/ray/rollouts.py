"""Rollouts on Ray: worker actors run the environment, the trainer consumes groups from the store.

Design (docs/scaling.md, "Ray"):

* the trainer keeps the model and its embedded engine, and serves the engine over HTTP
  (`EmbeddedServer`); weights never leave the trainer, so there is no weight sync to the
  workers: a policy update is visible to the next request, as in process;
* each `RolloutWorker` actor loads the environment itself (``load_environment(env_id)``) and
  talks to that server with its own OpenAI client; it runs one *group* per call (a group is
  never split) and puts it, packed, straight into the `RayExperienceStore` actor;
* `RayBatchGenerator` is the in-process `BatchGenerator` with a different ``_generate``: the
  same prompt order, group ids and per-sample seeds (so a Ray run samples what an in-process
  run samples), the same batch bookkeeping and resume state. It hands each group to a worker
  and waits for the reports. A worker that dies mid-step (``RayActorError``) is replaced and its
  groups are sent to another worker. Nothing is counted twice: the store keys groups by id,
  so a group the dead worker had already put is overwritten by the rerun, or ignored if the
  trainer had taken it, and the batch counts each group once, from the run that reported.

With several training processes (``accelerate launch``) rank 0 starts all of this and the other
ranks join it (`start_for_trainer`; the split of each step is `trainers.grpo.ray.shares`). With
the embedded engine only rank 0's engine is served to the workers, the others' stay idle: the
replicas hold the same weights after every step (DDP), and per-sample seeds make a sample the
same whichever engine draws it, so one server is enough and the workers need one address, not
a routing of groups to ranks. Against vLLM the sync is `OneWriterSync` (rank 0 pushes, the others
wait), and rank 0 moves the store's policy version once per step, after that sync.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from trainers.grpo.data.generator import BatchGenerator, RolloutBatch
from trainers.grpo.data.sampler import rank_groups
from trainers.grpo.data.scoring import ScoringFailures, merge_failures
from trainers.grpo.data.store import ExperienceStore, PutStatus
from trainers.grpo.dist.ranks import Dist
from trainers.grpo.ray.cluster import require_ray
from trainers.grpo.ray.shares import STORE_NAMESPACE, FollowerGenerator, RankShareStore
from trainers.grpo.ray.store import RayExperienceStore
from trainers.grpo.sync.base import ExternalServerSync
from trainers.grpo.sync.ranked import OneWriterSync
from trainers.grpo.sync.weight_sync import SharedEngineSync, WeightSync
from verifiers.clients import make_client
from verifiers.clients.balanced import ChatTarget, make_chat_client
from verifiers.envs.environment import Environment
from verifiers.envs.loader import load_environment
from verifiers.errors import ConfigError, VFError
from verifiers.rollout.inputs import RolloutInput
from verifiers.types import GenerateOutputs


class RolloutWorkersLostError(VFError):
    """Rollout workers kept dying (more than ``max_worker_restarts``): the cluster is unhealthy."""


@dataclass
class GroupReport:
    """What a worker tells the trainer about one group (the rollouts went to the store)."""

    group_id: int
    status: PutStatus
    rewards: list[float]
    failures: ScoringFailures
    seconds: float
    worker: int


@dataclass
class WorkerSpec:
    """Everything a worker needs to build its environment and client (plain, picklable data)."""

    env_id: str
    env_args: dict[str, Any]
    base_url: str
    model_name: str
    sampling_args: dict[str, Any]
    max_concurrent: int
    rollout_timeout_s: float | None
    put_timeout_s: float
    api_key: str = "EMPTY"
    """The key of the engine's HTTP server (a fresh secret per run; see `start_ray_rollouts`)."""
    request_timeout_s: float = 600.0
    tokenizer_path: str | None = None
    """The policy's tokenizer, for environments that take one (`Environment.use_tokenizer`: an
    agent program's calls continue earlier calls token-exactly); skipped where the path is absent."""
    chat_template: str | None = None
    """The run's chat template (vf-train's ``chat_template`` or the registry's tool template), set on
    that tokenizer; None keeps its own."""
    targets: list[ChatTarget] = field(default_factory=list)
    """External inference servers (vLLM replicas, a vf-serve) the workers call directly, with group
    affinity over several; empty: the trainer's embedded engine at ``base_url``."""


class RolloutWorker:
    """Actor body (async): one environment, one client; runs whole groups into the store."""

    def __init__(self, spec: WorkerSpec, store: RayExperienceStore, index: int) -> None:
        self.spec = spec
        self.store = store
        self.index = index
        self.env: Environment = load_environment(spec.env_id, **spec.env_args)
        if spec.tokenizer_path and os.path.isdir(spec.tokenizer_path):
            from transformers import AutoTokenizer

            from verifiers.models.chat_templates import use_chat_template

            tokenizer = AutoTokenizer.from_pretrained(spec.tokenizer_path)
            self.env.use_tokenizer(use_chat_template(tokenizer, spec.chat_template))
        if spec.targets:  # the servers the trainer syncs; one conversation stays on one replica
            self.client = make_chat_client(spec.targets, balance="affinity", timeout=spec.request_timeout_s)
        else:
            self.client = make_client(spec.base_url, api_key=spec.api_key, timeout=spec.request_timeout_s)
        self.sampling_args = self.env.merge_sampling_args(spec.sampling_args)

    async def run_group(self, inputs: list[RolloutInput], policy_version: int) -> GroupReport:
        from verifiers.rollout.runner import run_rollouts

        t = time.perf_counter()
        results = await run_rollouts(self.env, self.client, self.spec.model_name, inputs,
                                     sampling_args=self.sampling_args, max_concurrent=self.spec.max_concurrent,
                                     rollout_timeout_s=self.spec.rollout_timeout_s)
        results.sort(key=lambda r: r.rollout_index)
        rewards = [r.reward for r in results]
        gid = inputs[0].group_id
        status = await self.store.aput(gid, {"result": results, "reward": rewards}, policy_version=policy_version,
                                       timeout=self.spec.put_timeout_s)
        return GroupReport(gid, status, rewards, ScoringFailures.of(results), time.perf_counter() - t, self.index)

    async def evaluate(self, num_examples: int, sampling_args: dict[str, Any]) -> GenerateOutputs:
        return await self.env.a_evaluate(self.client, self.spec.model_name, sampling_args=sampling_args,
                                         num_examples=num_examples, rollouts_per_example=1,
                                         max_concurrent=self.spec.max_concurrent)

    def pid(self) -> int:
        import os

        return os.getpid()

    def node_id(self) -> str:
        """The Ray node this worker was placed on (``worker_resources`` decides which may host it)."""
        import ray

        return str(ray.get_runtime_context().get_node_id())


@dataclass
class RayRolloutBatch(RolloutBatch):
    """A batch whose groups the workers already put into the store (``results`` stays empty)."""

    reports: list[GroupReport] = field(default_factory=list)
    retried_groups: int = 0

    def failures(self) -> ScoringFailures:
        return merge_failures([r.failures for r in self.reports])

    def put_into(self, store: ExperienceStore) -> list[float]:
        """Nothing to put (the workers did); the rewards of the groups the store filtered."""
        return [x for rep in self.reports if rep.status == "filtered" for x in rep.rewards]


class RayBatchGenerator(BatchGenerator):
    """`BatchGenerator` whose groups run on Ray worker actors (see module doc)."""

    def __init__(self, env: Environment, rows: Sequence[dict[str, Any]], *, spec: WorkerSpec,
                 store: RayExperienceStore, num_workers: int, worker_num_cpus: float, max_worker_restarts: int,
                 worker_resources: dict[str, float] | None = None, trainer_ranks: int = 1,
                 **generator_kwargs: Any) -> None:
        ray = require_ray()
        super().__init__(env, rows, make_client=lambda: None, model_name=spec.model_name,
                         sampling_args=spec.sampling_args, max_concurrent=spec.max_concurrent,
                         rollout_timeout_s=spec.rollout_timeout_s, **generator_kwargs)
        self.trainer_ranks = trainer_ranks
        self._share = len(rank_groups(self.P, 0, trainer_ranks))  # refuses a batch the ranks cannot split
        self.spec = spec
        self.store = store
        self._actor_cls = ray.remote(num_cpus=worker_num_cpus, resources=dict(worker_resources or {}),
                                     max_restarts=0)(RolloutWorker)
        self._started = 0
        self.restarts_left = max_worker_restarts
        self.workers: list[Any] = [self._new_worker() for _ in range(num_workers)]
        self._next_worker = 0
        self.retried_groups = 0

    @property
    def groups_per_rank(self) -> int:
        """Groups of a batch each training process trains: this generator generates all of them."""
        return self._share

    def _new_worker(self) -> Any:
        self._started += 1
        return self._actor_cls.remote(self.spec, self.store, self._started - 1)

    def _pick(self, avoid: Any = None) -> Any:
        live = [w for w in self.workers if w is not avoid] or self.workers
        w = live[self._next_worker % len(live)]
        self._next_worker += 1
        return w

    def _lost(self, worker: Any, exc: BaseException) -> None:
        """Take a dead worker out of the pool and start a replacement while restarts remain."""
        if worker in self.workers:
            self.workers.remove(worker)
            if self.restarts_left <= 0:
                raise RolloutWorkersLostError(
                    f"a rollout worker died ({type(exc).__name__}: {exc}) and max_worker_restarts is used up; "
                    "check the workers' logs (ray logs) and the cluster's health, then --resume"
                ) from exc
            self.restarts_left -= 1
            self.workers.append(self._new_worker())

    async def _run_group(self, inputs: list[RolloutInput], version: int) -> tuple[GroupReport, int]:
        """One group to completion on some worker; returns its report and how often it was rerun."""
        import ray

        retries = 0
        worker = self._pick()
        while True:
            ref = worker.run_group.remote(inputs, version)
            try:
                return await ref, retries
            except ray.exceptions.RayActorError as exc:
                self._lost(worker, exc)
                retries += 1
                worker = self._pick(avoid=worker)
            except asyncio.CancelledError:  # the batch was dropped (stop, resume): stop its work too
                ray.cancel(ref)
                raise

    async def _generate(self, batch_id: int, version: int, inputs: list[RolloutInput],
                        sampler_state: dict[str, Any]) -> RolloutBatch:
        t = time.perf_counter()
        by_group: dict[int, list[RolloutInput]] = {}
        for inp in inputs:
            by_group.setdefault(inp.group_id, []).append(inp)
        done = await asyncio.gather(*(self._run_group(g, version) for g in by_group.values()))
        reports = [r for r, _ in done]
        retried = sum(1 for _, n in done if n)
        self.retried_groups += retried
        return RayRolloutBatch(batch_id, version, [], time.perf_counter() - t, sampler_state,
                               reports=reports, retried_groups=retried)

    def metrics(self) -> dict[str, float]:
        """Groups rerun because their worker died (cumulative)."""
        return {"ray/retried_groups": float(self.retried_groups)}

    def evaluate(self, num_examples: int, sampling_args: dict[str, Any]) -> GenerateOutputs:
        async def run() -> GenerateOutputs:
            return await self._pick().evaluate.remote(num_examples, sampling_args)

        return self._call(run(), timeout=self.timeout_s)

    def worker_pids(self) -> list[int]:
        import ray

        return [int(p) for p in ray.get([w.pid.remote() for w in self.workers])]

    def kill_workers(self) -> None:
        import ray

        for w in self.workers:
            ray.kill(w)
        self.workers = []

    def close(self) -> None:
        super().close()
        self.kill_workers()


@dataclass
class RayRollouts:
    """What a Ray run starts besides the trainer: the engine's HTTP server (None with external
    servers, and on ranks other than 0), the store, the workers.

    ``generator``: a `RayBatchGenerator`, or a `FollowerGenerator` on ranks other than 0;
    ``store``: the `RayExperienceStore`, or with several processes each rank's `RankShareStore`.
    """

    generator: BatchGenerator
    store: RayExperienceStore | RankShareStore
    server: Any
    started_ray: bool

    def close(self) -> None:
        """Stop the workers, the store actor and the server; leave Ray if this process joined or started it
        (the cluster ends with the process that started it). Ranks other than 0 only leave."""
        import contextlib

        import ray

        kill = getattr(self.generator, "kill_workers", None)
        if kill is not None:
            with contextlib.suppress(Exception):
                kill()  # the trainer closes the generator's loop itself
        with contextlib.suppress(Exception):
            self.store.close()
        if self.server is not None:  # None: the workers use external servers, or not this rank's
            self.server.stop()
        if self.started_ray:
            ray.shutdown()


def start_ray_rollouts(cfg: Any, env: Environment, rows: Sequence[dict[str, Any]], engine: Any,
                       sampling_args: dict[str, Any], *, store_kwargs: dict[str, Any],
                       targets: Sequence[ChatTarget] = (), tokenizer_path: str | None = None,
                       store_name: str | None = None, trainer_ranks: int = 1) -> RayRollouts:
    """Join or start Ray, start the store actor and the workers; the workers generate from ``engine``
    (served here over HTTP) or, with ``targets``, from those external servers directly.

    ``store_name``: the store actor's name (in `STORE_NAMESPACE`), for other processes to find it;
    ``trainer_ranks``: the training processes that share each batch (`RayBatchGenerator`)."""
    import os

    from trainers.grpo.ray.cluster import init_ray
    from verifiers.models.chat_templates import resolve_chat_template

    rc = cfg.ray
    # The workers import the environment by name: they must find what this process finds.
    runtime_env = {"env_vars": {"PYTHONPATH": os.environ["PYTHONPATH"]}} if os.environ.get("PYTHONPATH") else None
    started = init_ray(rc.address, num_cpus=rc.num_cpus, runtime_env=runtime_env)
    server: Any = None
    store: RayExperienceStore | None = None
    try:
        if targets:
            base_url, key = targets[0].base_url, targets[0].api_key or "EMPTY"
        else:
            server, base_url, key = _serve_engine(cfg, engine)
            tokenizer_path = getattr(engine.tokenizer, "name_or_path", None) or None
        store = RayExperienceStore(max_groups=rc.store_max_groups, name=store_name,
                                   namespace=STORE_NAMESPACE if store_name else None, **store_kwargs)
        spec = WorkerSpec(env_id=cfg.env_id, env_args=dict(cfg.env_args), base_url=base_url,
                          model_name=cfg.server_model_name, sampling_args=sampling_args,
                          max_concurrent=cfg.max_concurrent, rollout_timeout_s=cfg.rollout_timeout_s,
                          put_timeout_s=rc.put_timeout_s, api_key=key, tokenizer_path=tokenizer_path,
                          chat_template=resolve_chat_template(cfg.model, cfg.chat_template)[0], targets=list(targets))
        generator = RayBatchGenerator(
            env, rows, spec=spec, store=store, num_workers=rc.num_workers, worker_num_cpus=rc.worker_num_cpus,
            max_worker_restarts=rc.max_worker_restarts, prompts_per_step=cfg.prompts_per_step,
            num_generations=cfg.num_generations, seed=cfg.seed, timeout_s=cfg.generation_timeout_s,
            worker_resources=rc.worker_resources, trainer_ranks=trainer_ranks,
        )
    except BaseException:
        if server is not None:
            server.stop()
        if store is not None:
            store.close()
        if started:
            import ray

            ray.shutdown()
        raise
    return RayRollouts(generator, store, server, started)


def _serve_engine(cfg: Any, engine: Any) -> tuple[Any, str, str]:
    """The trainer's engine over HTTP for the workers: ``(server, base_url, key)``.

    Always a key: with a non-loopback serve_host anyone on the network could otherwise generate, or
    load other weights into the policy through /weights/reload. The workers get it in their spec.
    The URL's host is ``advertise_host``, else ``serve_host``, else (0.0.0.0) this node's Ray IP.
    """
    from verifiers.inference.server.runner import EmbeddedServer

    rc = cfg.ray
    key = secrets.token_urlsafe(32)
    server = EmbeddedServer(engine, [cfg.server_model_name], host=rc.serve_host, port=rc.serve_port,
                            api_key=key).start()
    host = rc.advertise_host or rc.serve_host
    if host in ("0.0.0.0", "::"):
        import ray

        host = ray.util.get_node_ip_address()
    return server, f"http://{host}:{server.port}/v1", key


def start_for_trainer(cfg: Any, dist: Dist, sync: WeightSync, env: Environment, rows: Sequence[dict[str, Any]],
                      sampling_args: dict[str, Any], store_kwargs: dict[str, Any]) -> RayRollouts:
    """``[ray]``: rollout workers generate from the trainer's embedded engine (served over HTTP) or from
    the sync's servers; the store becomes an actor. With several processes rank 0 starts it all and
    the other ranks join (`_start_ranks`)."""
    engine, targets, tokenizer_path = _inference(sync)
    if dist.active:
        return _start_ranks(cfg, dist, env, rows, engine, sampling_args, store_kwargs, targets, tokenizer_path)
    return start_ray_rollouts(cfg, env, rows, engine, sampling_args, store_kwargs=store_kwargs, targets=targets,
                              tokenizer_path=tokenizer_path)


def _inference(sync: WeightSync) -> tuple[Any, list[ChatTarget], str | None]:
    """What the workers generate from: ``(engine, [], None)`` for the embedded engine, else
    ``(None, the servers, the policy's tokenizer path)``."""
    if isinstance(sync, SharedEngineSync):
        return sync.engine, [], None
    # vLLM servers (or a vf-serve): the workers call them directly; the trainer syncs them after each
    # step as without Ray (with several processes rank 0 pushes: OneWriterSync around the same sync),
    # and the policy version it passes on is what the store enforces.
    servers = sync.inner if isinstance(sync, OneWriterSync) else sync
    if isinstance(servers, ExternalServerSync) and hasattr(servers, "targets"):
        tokenizer_path = getattr(getattr(servers, "tokenizer", None), "name_or_path", None) or None
        return None, servers.targets(), tokenizer_path
    raise ConfigError(f"[ray] cannot hand {type(sync).__name__}'s server to rollout workers: use the embedded "
                      "engine, base_url or [vllm]")


def _start_ranks(cfg: Any, dist: Dist, env: Environment, rows: Sequence[dict[str, Any]], engine: Any,
                 sampling_args: dict[str, Any], store_kwargs: dict[str, Any], targets: list[ChatTarget],
                 tokenizer_path: str | None) -> RayRollouts:
    """Rank 0 starts Ray, the workers and a named store (its engine served, if any); then every other
    rank joins the cluster at the address rank 0 reports and attaches to the store by name."""
    from trainers.grpo.ray.cluster import cluster_address, join_ray

    mine: list[RayRollouts] = []

    def lead() -> tuple[str, str, str | None, str]:
        name = f"vf-store-{secrets.token_hex(8)}"
        mine.append(start_ray_rollouts(cfg, env, rows, engine, sampling_args, store_kwargs=store_kwargs,
                                       targets=targets, tokenizer_path=tokenizer_path, store_name=name,
                                       trainer_ranks=dist.world_size))
        return (*cluster_address(), name)

    address, node_ip, auth_mode, name = dist.on_main("starting Ray rollouts", lead)
    run: RayRollouts | None = mine[0] if mine else None
    failure: BaseException | None = None
    if run is None:
        joined = False
        try:
            joined = join_ray(address, node_ip, auth_mode)
            store = RankShareStore(RayExperienceStore.attach(name, STORE_NAMESPACE), dist, store_kwargs)
            generator = FollowerGenerator(
                env, rows, model_name=cfg.server_model_name, sampling_args=sampling_args,
                prompts_per_step=cfg.prompts_per_step, num_generations=cfg.num_generations, seed=cfg.seed,
                max_concurrent=cfg.max_concurrent, rollout_timeout_s=cfg.rollout_timeout_s,
                timeout_s=cfg.generation_timeout_s, rank=dist.rank, world_size=dist.world_size)
            run = RayRollouts(generator, store, None, joined)
        except Exception as exc:
            failure = exc
            if joined:
                import ray

                ray.shutdown()
    if dist.any_rank(failure is not None):  # every rank stops, or rank 0 would wait for the others forever
        if run is not None:
            run.generator.close()
            run.close()
        if failure is not None:
            raise failure
        raise ConfigError(f"a training process could not join rank 0's Ray cluster at {address}: see its error above")
    assert run is not None
    if dist.is_main:  # every rank joined: from here on rank 0 takes each step for all of them
        run.store = RankShareStore(run.store, dist, store_kwargs)  # type: ignore[arg-type]
    return run
