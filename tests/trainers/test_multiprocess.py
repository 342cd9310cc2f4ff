"""Data-parallel training under ``accelerate launch``: 2 CPU processes (gloo) equal 1 process.

The launches are real: ``accelerate launch --multi_gpu --num_processes 2 -m trainers.grpo.cli``
(on a machine without a visible GPU, accelerate's multi-process launcher runs torchrun and the
processes join over gloo; ``--cpu`` would start a single process). Each rank generates its
share of the step's prompt groups with the embedded engine; per-sample seeds and an engine
batch of one make the samples independent of how the batch is split, so the 2-process run
must reproduce the 1-process run step by step.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from trainers.grpo.config import TrainConfig, load_config
from trainers.grpo.data.sampler import rank_groups
from trainers.grpo.run.checkpoint import load_checkpoint
from verifiers.errors import ConfigError

HERE = Path(__file__).parent
DENSE_ENV_ID = "vf-trainer-dense-env"  # written by conftest's dense_env_dir fixture
SETTINGS: dict[str, Any] = {
    "env_id": DENSE_ENV_ID,
    "model": "tiny",  # each run builds it in its output dir: rank 0 alone must write it
    "tiny_model": {"hidden_size": 32},
    "prompts_per_step": 2,
    "num_generations": 4,
    "max_tokens": 4,
    "max_steps": 3,
    "learning_rate": 3e-3,
    "lr_scheduler": "linear",
    "warmup_steps": 1,
    "save_every": 1,
    "keep_checkpoints": 3,
    "engine_max_batch_size": 1,  # batch composition changes float results; one request at a time
    "progress": False,
    "plot": False,
    "num_sample_completions": 0,
    "torch_threads": 1,
}
COMPARED = ("reward", "loss", "grad_norm", "entropy", "reward_std", "completions/mean_length", "rollouts/trained")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def child_env(env_dir: Path) -> dict[str, str]:
    """CPU only (gloo; a visible GPU would put both ranks on it), loopback, the test env importable."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(env_dir), str(HERE.parents[1]), env.get("PYTHONPATH", "")) if p)
    env.update(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", TQDM_DISABLE="1", GLOO_SOCKET_IFNAME="lo")
    return env


def accelerate_launch(args: list[str], env_dir: Path, log: Path, timeout_s: float = 240.0,
                      cpu: bool = False) -> tuple[int, str]:
    """Run ``accelerate launch`` with 2 processes on 127.0.0.1; on timeout kill the launched group only.

    ``cpu``: the ``accelerate launch --cpu --num_processes 2`` form, where accelerate starts one
    process and vf-train relaunches itself as two (trainers/grpo/dist/launch.py).
    """
    common = ["--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
    form = ["--cpu", *common] if cpu else ["--multi_gpu", *common, "--main_process_ip", "127.0.0.1",
                                           "--main_process_port", str(free_port())]
    cmd = [sys.executable, "-m", "accelerate.commands.launch", *form, *args]
    return run_in_session(cmd, child_env(env_dir), log, timeout_s)


def run_in_session(cmd: list[str], env: dict[str, str], log: Path, timeout_s: float) -> tuple[int, str]:
    """Run a launcher command in its own session, output to ``log``; on timeout kill that group only."""
    with log.open("w+") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, text=True, env=env,
                                start_new_session=True)
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the launcher and its workers: our own process group
            proc.wait()
            raise
        out.seek(0)
        return code, out.read()


def to_toml(data: dict[str, Any]) -> str:
    tables = {k: v for k, v in data.items() if isinstance(v, dict)}
    lines = [f"{k} = {json.dumps(v)}" for k, v in data.items() if v is not None and k not in tables]
    for name, table in tables.items():
        lines += [f"[{name}]", *(f"{k} = {json.dumps(v)}" for k, v in table.items() if v is not None)]
    return "\n".join(lines) + "\n"


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def train_one_process(cfg: TrainConfig, resume: str | bool = False) -> tuple[Any, list[dict[str, Any]]]:
    from rich.console import Console

    from trainers.grpo.trainer import GRPOTrainer

    trainer = GRPOTrainer(cfg, console=Console(file=io.StringIO()))
    trainer.train(resume=resume)
    return trainer, read_rows(Path(cfg.output_dir) / "metrics.jsonl")


@dataclass
class Runs:
    two: Path  # output_dir of the 2-process launch
    two_output: str
    one: Path
    one_rows: list[dict[str, Any]]
    one_weights: dict[str, torch.Tensor]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, dense_env_dir: Path) -> Runs:
    """The same 3-step run with 2 processes (launched) and with 1 (in this process)."""
    root = tmp_path_factory.mktemp("mp")
    two = root / "two"
    toml = root / "two.toml"
    toml.write_text(to_toml({**SETTINGS, "output_dir": str(two)}))
    code, output = accelerate_launch(["-m", "trainers.grpo.cli", str(toml)], dense_env_dir, root / "two.log", cpu=True)
    assert code == 0, output[-4000:]
    before = torch.get_num_threads()
    try:
        trainer, rows = train_one_process(load_config(None, {**SETTINGS, "output_dir": str(root / "one")}))
    finally:
        torch.set_num_threads(before)
    weights = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    return Runs(two, output, root / "one", rows, weights)


def assert_same_rows(a: list[dict[str, Any]], b: list[dict[str, Any]], tol: float = 1e-5) -> None:
    assert [r["step"] for r in a] == [r["step"] for r in b]
    for ra, rb in zip(a, b, strict=True):
        for key in COMPARED:
            assert rb[key] == pytest.approx(ra[key], abs=tol), (ra["step"], key)


# -- prompts ---------------------------------------------------------------------------------
def test_rank_groups_split_whole_groups_and_refuse_uneven_shares() -> None:
    assert [list(rank_groups(6, r, 3)) for r in range(3)] == [[0, 1], [2, 3], [4, 5]]
    assert list(rank_groups(4, 0, 1)) == [0, 1, 2, 3]
    with pytest.raises(ConfigError, match="divisible by the number of processes"):
        rank_groups(3, 0, 2)


def test_ranks_generate_disjoint_groups_whose_union_is_the_one_process_batch(dense_env_dir: Path) -> None:
    import verifiers as vf
    from trainers.grpo.data.generator import BatchGenerator

    env = vf.load_environment(DENSE_ENV_ID)
    rows = list(env.get_dataset().rows)

    def generator(rank: int, world: int) -> BatchGenerator:
        return BatchGenerator(env, rows, make_client=object, model_name="m", sampling_args={}, prompts_per_step=4,
                              num_generations=2, seed=7, max_concurrent=1, rollout_timeout_s=None, timeout_s=5,
                              rank=rank, world_size=world)

    def key(inp: Any) -> tuple[Any, ...]:
        return inp.group_id, inp.rollout_index, inp.example_id, inp.extra["sampling_args"]["seed"]

    gens = [generator(0, 1), generator(0, 2), generator(1, 2)]
    try:
        for batch_id in range(6):  # 6 x 4 prompts of 16: the second epoch's permutation too
            one, r0, r1 = ([key(i) for i in g.rollout_inputs(batch_id, g._draw())] for g in gens)
            assert {k[0] for k in r0}.isdisjoint({k[0] for k in r1})
            assert len(r0) == len(r1) == 4  # 2 groups of G = 2 each
            assert sorted(r0 + r1) == sorted(one)
    finally:
        for g in gens:
            g.close()


@pytest.mark.parametrize(("overrides", "message"), [
    ({"prompts_per_step": 3}, "must be divisible by the number of processes"),
])
def test_two_processes_refuse_what_they_cannot_split(
    overrides: dict[str, Any], message: str, tmp_path: Path, train_config: Callable[..., TrainConfig],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Checked before anything is loaded or written (rank 1 of 2, without a process group)."""
    from rich.console import Console

    from trainers.grpo.dist.ranks import Dist
    from trainers.grpo.trainer import GRPOTrainer

    monkeypatch.setattr(Dist, "start", classmethod(lambda cls, cpu: cls(rank=1, world_size=2)))
    trainer = GRPOTrainer(train_config(tmp_path / "run", **overrides), console=Console(file=io.StringIO()))
    with pytest.raises(ConfigError, match=message):
        trainer.setup()
    assert not (tmp_path / "run" / "config.json").exists()


@pytest.mark.parametrize("weight_sync", ["lora", "reload"])
def test_two_processes_accept_lora_against_servers(weight_sync: str, tmp_path: Path,
                                                   train_config: Callable[..., TrainConfig]) -> None:
    """The adapter alone or the merged weights: rank 0 pushes either to every replica
    (tests/vllm/test_vllm_ddp.py runs both)."""
    from trainers.grpo.config import validate_processes

    cfg = train_config(tmp_path / "run", base_url="http://127.0.0.1:9/v1", lora=True, weight_sync=weight_sync)
    validate_processes(cfg, 2)


def test_accelerate_cpu_launch_asks_for_its_process_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """``accelerate launch --cpu --num_processes N`` starts one process; vf-train reads N from the launcher's
    arguments, and says how to launch when it cannot."""
    from trainers.grpo.dist import launch

    cmd = ["/venv/bin/python", "/venv/bin/accelerate", "launch", "--cpu", "--num_processes", "3", "-m",
           "trainers.grpo.cli", "c.toml", "--num_processes", "9"]
    assert launch.launcher_num_processes(cmd) == 3  # the launcher's flag, not the script's
    assert launch.launcher_num_processes(["python", "-m", "accelerate.commands.launch", "--cpu",
                                          "--num_processes=2", "x.py"]) == 2
    assert launch.launcher_num_processes(["python", "train.py"]) is None
    for k in ("WORLD_SIZE", "ACCELERATE_USE_CPU", "MASTER_ADDR"):
        monkeypatch.delenv(k, raising=False)
    assert launch.cpu_launch_request() is None  # not under accelerate: one process, as asked
    monkeypatch.setenv("ACCELERATE_USE_CPU", "True")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")  # accelerate's sign that several processes were asked for
    with pytest.raises(ConfigError, match="--num_processes N"):  # this test's parent is no accelerate launcher
        launch.cpu_launch_request()
    args = ["c.toml", "--num_processes", "2", "--seed", "1"]
    assert launch.pop_num_processes(args) == 2 and args == ["c.toml", "--seed", "1"]
    with pytest.raises(ConfigError, match="positive integer"):
        launch.pop_num_processes(["--num_processes", "two"])


# -- the launched run ------------------------------------------------------------------------
@pytest.mark.slow
def test_two_processes_train_like_one(runs: Runs) -> None:
    two_rows = read_rows(runs.two / "metrics.jsonl")
    assert [r["rollouts/trained"] for r in two_rows] == [8.0] * 3  # the global batch, not one rank's
    assert_same_rows(runs.one_rows, two_rows)
    final = load_checkpoint(runs.two / "checkpoints" / "step_0000003")["model"]
    for name, tensor in runs.one_weights.items():
        torch.testing.assert_close(final[name], tensor, rtol=0, atol=1e-5, msg=name)


@pytest.mark.slow
def test_scheduler_advances_once_per_optimizer_step(runs: Runs) -> None:
    # linear, 1 warmup step of 3: 3e-3, 1.5e-3, 0 (stepped twice per step it would reach 0 at step 2)
    lrs = [r["learning_rate"] for r in read_rows(runs.two / "metrics.jsonl")]
    assert lrs == pytest.approx([r["learning_rate"] for r in runs.one_rows])
    assert lrs == pytest.approx([3e-3, 1.5e-3, 0.0])
    sched = load_checkpoint(runs.two / "checkpoints" / "step_0000002")["scheduler"]
    assert sched["last_epoch"] == 2


@pytest.mark.slow
def test_only_rank_zero_writes(runs: Runs) -> None:
    summaries = [ln for ln in runs.two_output.splitlines() if ln.startswith('{"steps"')]
    assert len(summaries) == 1, runs.two_output[-4000:]  # one process printed the summary
    assert json.loads(summaries[0])["steps"] == 3
    assert [r["step"] for r in read_rows(runs.two / "metrics.jsonl")] == [1, 2, 3]  # no duplicate rows
    ckpts = runs.two / "checkpoints"
    assert sorted(p.name for p in ckpts.iterdir()) == ["step_0000001", "step_0000002", "step_0000003"]  # no .tmp_*
    assert (runs.two / "config.json").is_file() and (runs.two / "final_model" / "config.json").is_file()
    assert (runs.two / "base_model" / "config.json").is_file()
    state = load_checkpoint(ckpts / "step_0000003")
    assert len(state["ranks"]) == 2  # each rank's own store and RNGs
    e0, e1 = (r["engine_rng"] for r in state["ranks"])
    assert not torch.equal(e0, e1)  # each rank's engine has its own seed
    assert torch.equal(state["engine_rng"], e0)


@pytest.mark.slow
def test_resume_a_two_process_checkpoint_in_one_process(runs: Runs, tmp_path: Path, dense_env_dir: Path) -> None:
    out = tmp_path / "resumed"
    shutil.copytree(runs.two, out)
    cfg = load_config(None, {**SETTINGS, "output_dir": str(out)})
    before = torch.get_num_threads()
    try:
        trainer, rows = train_one_process(cfg, resume=str(out / "checkpoints" / "step_0000002"))
    finally:
        torch.set_num_threads(before)
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert_same_rows(runs.one_rows, rows)  # step 3 redone by one process equals both runs' step 3
    for name, tensor in trainer.model.state_dict().items():
        torch.testing.assert_close(tensor, runs.one_weights[name], rtol=0, atol=1e-5, msg=name)


# -- the learner on a fixed batch --------------------------------------------------------------
def load_helper() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mp_learner_step", HERE / "mp_learner_step.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.parametrize("rows", ["one_per_rollout", "split"])
def test_learner_step_split_over_two_ranks_equals_one_process(
    tmp_path: Path, dense_env_dir: Path, train_config: Callable[..., TrainConfig], rows: str
) -> None:
    """A fixed batch of 4 groups: 2 ranks x 2 groups (2 micro-batches each, so `no_sync` is used)
    against 1 process x 4 groups. Without the global normaliser the entropy would double; without
    the world-size scaling DDP's average would halve the gradient. ``split``: each group's first
    rollout is two rows (advantage once per rollout, counted once by the normaliser)."""
    split = rows == "split"
    settings = {"prompts_per_step": 4, "gradient_accumulation_steps": 2, "learning_rate": 1e-2}
    cfg = train_config(tmp_path / "one", **settings)
    before = torch.get_num_threads()
    try:
        one = load_helper().learner_step(write_config(cfg, tmp_path / "one.json"), tmp_path / "one", split)
    finally:
        torch.set_num_threads(before)
    cfg2 = train_config(tmp_path / "two", **settings)
    code, output = accelerate_launch([str(HERE / "mp_learner_step.py"), str(write_config(cfg2, tmp_path / "two.json")),
                                      str(tmp_path / "two"), *(["split"] if split else [])], dense_env_dir,
                                     tmp_path / "two.log")
    assert code == 0, output[-4000:]
    ranks = [json.loads((tmp_path / "two" / f"rank{r}.json").read_text()) for r in range(2)]
    assert [r["world_size"] for r in ranks] == [2, 2]
    for key in ("loss", "entropy", "grad_norm", "learning_rate"):
        for r in ranks:  # every rank reports the global value
            assert r[key] == pytest.approx(one[key], abs=1e-5), key
    assert one["grad_norm"] > 1e-3
    # Adam's first step moves each weight by about lr x sign(gradient): a weight whose gradient
    # went the wrong way would be ~2e-2 off; float noise on a gradient near Adam's eps moves a
    # few weights by ~1e-5. The replicas themselves stay identical.
    want = torch.load(tmp_path / "one" / "params_rank0.pt")
    got = [torch.load(tmp_path / "two" / f"params_rank{r}.pt") for r in range(2)]
    for name, tensor in want.items():
        assert torch.equal(got[0][name], got[1][name]), name
        torch.testing.assert_close(got[0][name], tensor, rtol=0, atol=1e-4, msg=name)


def write_config(cfg: TrainConfig, path: Path) -> Path:
    path.write_text(cfg.model_dump_json())
    return path


# -- LoRA under data parallelism ---------------------------------------------------------------
@pytest.mark.slow
def test_lora_with_kl_in_two_processes_trains_like_one(tmp_path: Path, dense_env_dir: Path) -> None:
    """Adapters (and a fully trained embedding) under DDP, with the KL to the adapters-off base as
    reference: the 2-process run equals the 1-process run step by step, and so do the adapters."""
    settings = {**SETTINGS, "max_steps": 2, "save_every": 2, "lora": True, "lora_r": 4, "lora_alpha": 8,
                "lora_modules_to_save": ["embed_tokens"], "algorithm_overrides": {"beta": 0.04},
                "lr_scheduler": "constant", "warmup_steps": 0}  # step 1 moves the adapters: KL > 0 at step 2
    two = tmp_path / "two"
    toml = tmp_path / "two.toml"
    toml.write_text(to_toml({**settings, "output_dir": str(two)}))
    code, output = accelerate_launch(["-m", "trainers.grpo.cli", str(toml)], dense_env_dir, tmp_path / "two.log",
                                     cpu=True)
    assert code == 0, output[-4000:]
    before = torch.get_num_threads()
    try:
        trainer, one_rows = train_one_process(load_config(None, {**settings, "output_dir": str(tmp_path / "one")}))
    finally:
        torch.set_num_threads(before)
    two_rows = read_rows(two / "metrics.jsonl")
    assert_same_rows(one_rows, two_rows)
    assert all(r["kl"] >= 0 for r in two_rows) and two_rows[-1]["kl"] > 0  # the reference is the base, not a copy
    final = load_checkpoint(two / "checkpoints" / "step_0000002")["model"]
    trained = {k: v for k, v in trainer.model.state_dict().items() if "lora_" in k or "modules_to_save" in k}
    assert trained, "no adapter weights in the one-process model"
    for name, tensor in trained.items():
        torch.testing.assert_close(final[name], tensor, rtol=0, atol=1e-5, msg=name)
