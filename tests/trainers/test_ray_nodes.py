"""Rollouts on a Ray cluster of several nodes on this machine: a head (the trainer and the store)
and two rollout nodes that alone carry the ``rollout`` resource, every node bound to 127.0.0.1.

Workers are placed by ``[ray] worker_resources``; killing the node of a worker in the middle of
a step loses no group and counts none twice: its groups are rerun by a worker on the surviving
node. The cluster's processes are ours (ray.cluster_utils starts them); the fixture checks by
pid that none is left.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")

from trainers.grpo.config import TrainConfig  # noqa: E402
from trainers.grpo.ray.cluster import local_env  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
COLUMNS = ("result", "reward")


def descendants() -> set[Any]:
    """This process's descendants as ``psutil.Process`` objects (a pid and its start time)."""
    return set(psutil.Process().children(recursive=True))


@pytest.fixture(scope="module")
def cluster(dense_env_dir: Path, left_alive: Callable[..., dict[int, str]],
            restore_environ: Callable[..., None]) -> Iterator[Any]:
    """Head (1 CPU, no rollout resource) + two rollout nodes (1 CPU, ``rollout: 2`` each), joined."""
    from ray._private import ray_constants
    from ray.cluster_utils import Cluster

    saved = {k: os.environ.get(k) for k in local_env()}
    os.environ.update(local_env())
    # read when `ray` was first imported (before this fixture): a loopback-only cluster needs it off
    saved_switch, ray_constants.ENABLE_RAY_CLUSTER = ray_constants.ENABLE_RAY_CLUSTER, False
    path = os.pathsep.join(p for p in (str(dense_env_dir), str(Path(__file__).parents[2]),
                                       os.environ.get("PYTHONPATH", "")) if p)
    before = descendants()
    assert not ray.is_initialized(), "Ray is already running in this process"
    nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "node_ip_address": "127.0.0.1",
                                                          "include_dashboard": False})
    try:
        nodes.rollout = [nodes.add_node(num_cpus=1, resources={"rollout": 2}, node_ip_address="127.0.0.1")
                         for _ in range(2)]
        ray.init(address=nodes.address, _node_ip_address="127.0.0.1", configure_logging=False,
                 runtime_env={"env_vars": {"PYTHONPATH": path}})
        nodes.started = {p.pid for p in descendants() - before}
        yield nodes
    finally:
        started = descendants() - before
        ray.shutdown()
        nodes.shutdown()
        alive = left_alive(started)
        ray_constants.ENABLE_RAY_CLUSTER = saved_switch
        restore_environ(saved)
        assert not alive, f"Ray processes left behind: {alive}"


def test_every_node_listens_on_loopback_only(cluster: Any) -> None:
    assert sorted(n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]) == ["127.0.0.1"] * 3
    listening = [c for c in psutil.net_connections(kind="inet")
                 if c.status == psutil.CONN_LISTEN and c.pid in cluster.started]
    assert listening, "found no listening socket of the cluster's processes"
    assert all(c.laddr.ip in ("127.0.0.1", "::ffff:127.0.0.1") for c in listening), listening


def test_workers_on_rollout_nodes_and_a_killed_node_loses_no_group(
    cluster: Any, tmp_path: Path, train_config: Callable[..., TrainConfig]
) -> None:
    import verifiers as vf
    from trainers.grpo.ray.rollouts import start_ray_rollouts
    from verifiers.inference.engine import InferenceEngine
    from verifiers.inference.engine.loading import load_model_and_tokenizer

    cfg = train_config(tmp_path, prompts_per_step=4, num_generations=2, env_args={"score_delay_s": 1.0},
                       ray={"num_workers": 2, "worker_num_cpus": 0, "worker_resources": {"rollout": 1}})
    model, tok = load_model_and_tokenizer(cfg.model)
    engine = InferenceEngine(model, tok, max_batch_size=4, seed=0)
    env = vf.load_environment(cfg.env_id, **cfg.env_args)
    sampling = {"max_tokens": cfg.max_tokens, "temperature": 1.0, "logprobs": True,
                "extra_body": {"return_token_ids": True}}
    run = start_ray_rollouts(cfg, env, list(env.get_dataset().rows), engine, sampling,
                             store_kwargs={"consumers": ("trainer",), "columns": COLUMNS, "seed": 0})
    gen = run.generator
    head = ray.get_runtime_context().get_node_id()
    rollout_nodes = {n.node_id: n for n in cluster.rollout}
    try:
        assert ray.get(run.store.actor.node_id.remote()) == head  # the experience stays with the trainer
        placed = ray.get([w.node_id.remote() for w in gen.workers])
        assert set(placed) <= set(rollout_nodes)  # never on the head: it has no rollout resource
        first = gen.get(gen.submit(0))
        assert sorted(r.group_id for r in first.reports) == [0, 1, 2, 3] and first.retried_groups == 0

        victim_node = rollout_nodes[placed[0]]
        doomed = [w for w, n in zip(gen.workers, placed, strict=True) if n == placed[0]]
        mid = gen.submit(1)
        time.sleep(0.5)  # its groups are being scored (1 s each)
        cluster.remove_node(victim_node)
        second = gen.get(mid)
        assert sorted(r.group_id for r in second.reports) == [4, 5, 6, 7]  # every group, each once
        assert second.retried_groups >= 1
        assert not set(doomed) & set(gen.workers) and len(gen.workers) == 2  # replaced
        survivor = next(n for n in rollout_nodes if n != placed[0])
        assert set(ray.get([w.node_id.remote() for w in gen.workers])) == {survivor}
        stats = run.store.stats()
        assert stats["put_groups"] == 8 and stats["live_groups"] == 8  # nothing counted twice
        got = run.store.get("trainer", list(COLUMNS), 8)
        assert got is not None and [got.group_index.count(i) for i in range(8)] == [2] * 8
        assert all(r.tokens and r.tokens[0].completion_ids for r in got.columns["result"])
    finally:
        gen.close()
        run.close()
        engine.stop()
