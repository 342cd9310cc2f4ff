"""Ray rollouts with 2 training processes: launched for real (gloo), against 1 process with Ray.

The 2-process run is ``accelerate launch --cpu --num_processes 2 -m trainers.grpo.cli`` with
``[ray]``: rank 0 starts a local 127.0.0.1 cluster, the workers and the named store actor and
serves its engine; rank 1 joins at the address rank 0 reports. One rollout worker is killed
(SIGKILL, as the OOM killer would) once the first step is logged, so a later batch has groups
rerun. With an engine batch of one and per-sample seeds the samples do not depend on which engine
or worker draws them, so the 2-process run must still equal the 1-process ``[ray]`` run (its own
local cluster, in this process) step by step, within 1e-5. Every process either run started
(training processes, Ray's GCS, raylet and workers) is recorded while it runs and must be gone
afterwards (by pid, never by name).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ray = pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")

from trainers.grpo.config import load_config  # noqa: E402
from trainers.grpo.ray.cluster import local_env  # noqa: E402
from trainers.grpo.run.checkpoint import load_checkpoint  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(480)]
HERE = Path(__file__).parent
COMPARED = ("reward", "loss", "grad_norm", "entropy", "reward_std", "completions/mean_length", "rollouts/trained")


def multiprocess_helpers() -> ModuleType:
    """test_multiprocess.py's launcher (``--import-mode=importlib``: test modules are not importable by name)."""
    spec = importlib.util.spec_from_file_location("vf_test_multiprocess_helpers", HERE / "test_multiprocess.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


@dataclass
class Watch:
    """Records every descendant of this process started while a run goes on; optionally SIGKILLs one
    rollout worker (such a descendant whose title is Ray's ``ray::RolloutWorker``) once ``metrics``
    has a row. Descendants already running at the start (an earlier test's Ray cluster in this
    pytest process, a shared vLLM server) are not the run's: they are left out."""

    metrics: Path | None = None
    seen: set[int] = field(default_factory=set)
    procs: set[Any] = field(default_factory=set)  # psutil.Process of each pid seen (pid and start time)
    killed: list[int] = field(default_factory=list)
    listening: list[tuple[int, str, str]] = field(default_factory=list)  # (pid, process name, address)
    _stop: threading.Event = field(default_factory=threading.Event)
    _before: set[Any] = field(default_factory=set)

    def __enter__(self) -> Watch:
        self._before = set(psutil.Process().children(recursive=True))
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._poll()

    def _poll(self) -> list[Any]:
        procs = [p for p in psutil.Process().children(recursive=True) if p not in self._before]
        self.procs |= set(procs)
        self.seen |= {p.pid for p in procs}
        return procs

    def _run(self) -> None:
        while not self._stop.wait(0.3):
            procs = self._poll()
            if self.metrics is None or self.killed or not self.metrics.is_file() or not self.metrics.read_text():
                continue
            workers = []
            for p in procs:
                try:
                    if p.cmdline()[:1] and p.cmdline()[0].startswith("ray::RolloutWorker"):
                        workers.append(p)
                except psutil.Error:
                    continue
            if workers:
                self._record_listening()
                os.kill(workers[0].pid, signal.SIGKILL)  # a process of the run this test started
                self.killed.append(workers[0].pid)

    def _record_listening(self) -> None:
        for c in psutil.net_connections(kind="inet"):
            if c.status == psutil.CONN_LISTEN and c.pid in self.seen:
                try:
                    name = psutil.Process(c.pid).name()
                except psutil.Error:
                    continue
                self.listening.append((c.pid, name, c.laddr.ip))


@dataclass
class Runs:
    two: Path
    two_output: str
    two_rows: list[dict[str, Any]]
    one_rows: list[dict[str, Any]]
    one_trainer: Any
    watch_two: Watch
    watch_one: Watch


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, dense_env_dir: Path, base_model_dir: Path,
         left_alive: Callable[..., dict[int, str]],
         restore_environ: Callable[..., None]) -> Iterator[Runs]:
    mp = multiprocess_helpers()
    root = tmp_path_factory.mktemp("ray-ranks")
    settings: dict[str, Any] = {
        **{k: v for k, v in mp.SETTINGS.items() if k != "tiny_model"}, "model": str(base_model_dir), "save_every": 0,
        "env_args": {"score_delay_s": 0.5},  # a group takes a while: the killed worker is missed mid-run
        "ray": {"num_workers": 2, "worker_num_cpus": 0.5, "num_cpus": 2},
    }
    two = root / "two"
    toml = root / "two.toml"
    toml.write_text(mp.to_toml({**settings, "output_dir": str(two)}))
    with Watch(metrics=two / "metrics.jsonl") as watch_two:
        code, output = mp.accelerate_launch(["-m", "trainers.grpo.cli", str(toml)], dense_env_dir,
                                            root / "two.log", timeout_s=300, cpu=True)
    assert code == 0, output[-5000:]
    gone = left_alive(watch_two.procs)
    assert not gone, f"processes of the 2-process run left behind: {gone}"

    # The same run in one process (this one), with its own local cluster; the workers import the
    # test environment by name, through the PYTHONPATH the trainer hands them.
    from ray._private import ray_constants

    saved = {k: os.environ.get(k) for k in (*local_env(), "PYTHONPATH", "RAY_AUTH_MODE")}
    saved_switch = ray_constants.ENABLE_RAY_CLUSTER
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(dense_env_dir), str(HERE.parents[1]),
                                                           os.environ.get("PYTHONPATH", "")) if p)
    assert not ray.is_initialized()
    try:
        with Watch() as watch_one:
            one_trainer, one_rows = mp.train_one_process(load_config(None, {**settings, "output_dir": str(root / "one")}))
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved_switch
        restore_environ(saved)
    assert not ray.is_initialized()  # the run shut down the cluster it started
    gone = left_alive(watch_one.procs)
    assert not gone, f"processes of the 1-process run left behind: {gone}"
    yield Runs(two, output, read_rows(two / "metrics.jsonl"), one_rows, one_trainer, watch_two, watch_one)


def test_two_processes_with_ray_train_the_one_process_batch(runs: Runs) -> None:
    assert [r["step"] for r in runs.two_rows] == [1, 2, 3]
    assert [r["rollouts/trained"] for r in runs.two_rows] == [8.0] * 3  # the global batch, not one rank's
    for a, b in zip(runs.one_rows, runs.two_rows, strict=True):
        for key in COMPARED:
            assert b[key] == pytest.approx(a[key], abs=1e-5), (a["step"], key)
    assert [r["policy_version"] for r in runs.two_rows] == [1.0, 2.0, 3.0]
    assert all(r["staleness"] == 0.0 for r in runs.two_rows)


def test_a_killed_worker_has_its_groups_rerun(runs: Runs) -> None:
    assert len(runs.watch_two.killed) == 1
    assert runs.two_rows[-1]["ray/retried_groups"] >= 1  # and the steps still equal the 1-process run's
    assert runs.one_rows[-1]["ray/retried_groups"] == 0.0


def test_rank_zero_owns_the_cluster_and_everything_listens_on_loopback(runs: Runs) -> None:
    summaries = [ln for ln in runs.two_output.splitlines() if ln.startswith('{"steps"')]
    assert len(summaries) == 1, runs.two_output[-4000:]  # one process printed the summary
    # Ray's processes, the training processes and rank 0's engine server. Not checked: torchrun's
    # agent (``pt_elastic``), the launcher's rendezvous store, which torch binds to every interface.
    listening = [(pid, name, ip) for pid, name, ip in runs.watch_two.listening if name != "pt_elastic"]
    assert any(name.startswith(("gcs_server", "raylet")) for _, name, _ in listening), listening
    for pid, name, ip in listening:
        assert ip in ("127.0.0.1", "::ffff:127.0.0.1"), (pid, name, ip)
    state = load_checkpoint(runs.two / "checkpoints" / "step_0000003")
    assert len(state["ranks"]) == 2
    assert state["ranks"][1]["store"]["groups"] == []  # the groups live in rank 0's store, saved once
    assert state["store"]["policy_version"] == 3  # rank 0 moved the store's version once per step
    assert runs.one_trainer.ray.started_ray and runs.one_trainer.ray.server._server is None
