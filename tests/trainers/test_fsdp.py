"""FSDP2 on the CPU: 2 sharded gloo processes train like 1 process, and their checkpoints resume in either.

The launches are real: ``accelerate launch --config_file examples/accelerate/fsdp.yaml -m
trainers.grpo.cli`` (on a machine without a GPU its processes join over gloo) and its ``--cpu``
form (one process started, relaunched as 2 sharded ones). Each rank's parameters are DTensor shards (`fully_shard`); the
embedded engine samples from a full copy refreshed by one gather per step, which the
sampler-versus-learner metrics check (a stale copy would sample from the previous policy).
The reference model (KL) is sharded too.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from trainers.grpo.config import load_config
from trainers.grpo.run.checkpoint import load_checkpoint
from verifiers.errors import ConfigError

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
FSDP_YAML = ROOT / "examples" / "accelerate" / "fsdp.yaml"


def _multiprocess() -> ModuleType:
    """tests/trainers/test_multiprocess.py's helpers (settings, launch environment, row comparison)."""
    spec = importlib.util.spec_from_file_location("vf_tests_multiprocess", HERE / "test_multiprocess.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


mp = _multiprocess()
# KL on (the reference is sharded too); 3 steps, a checkpoint after each.
SETTINGS: dict[str, Any] = {**mp.SETTINGS, "algorithm_overrides": {"beta": 0.04}}


def launch(cmd: list[str], env_dir: Path, log: Path, timeout_s: float = 300.0) -> tuple[int, str]:
    """Run a launcher command; on timeout kill the launched process group only."""
    return mp.run_in_session(cmd, mp.child_env(env_dir), log, timeout_s)


def accelerate_fsdp(args: list[str], env_dir: Path, log: Path) -> tuple[int, str]:
    """``accelerate launch --config_file examples/accelerate/fsdp.yaml`` (a free port on 127.0.0.1)."""
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(FSDP_YAML),
           "--main_process_port", str(mp.free_port()), *args]
    return launch(cmd, env_dir, log)


def one_process(settings: dict[str, Any], out: Path, resume: str | bool = False) -> tuple[Any, list[dict[str, Any]]]:
    before = torch.get_num_threads()
    try:
        return mp.train_one_process(load_config(None, {**settings, "output_dir": str(out)}), resume=resume)
    finally:
        torch.set_num_threads(before)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, dense_env_dir: Path) -> dict[str, Any]:
    """The same 3-step run: 2 FSDP processes (launched) and 1 process (in this one)."""
    root = tmp_path_factory.mktemp("fsdp")
    toml = root / "two.toml"
    toml.write_text(mp.to_toml({**SETTINGS, "output_dir": str(root / "two")}))
    code, output = accelerate_fsdp(["-m", "trainers.grpo.cli", str(toml)], dense_env_dir, root / "two.log")
    assert code == 0, output[-4000:]
    trainer, rows = one_process(SETTINGS, root / "one")
    weights = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    return {"root": root, "two": root / "two", "output": output, "one_rows": rows, "one_weights": weights}


@pytest.mark.slow
def test_two_sharded_processes_train_like_one(runs: dict[str, Any]) -> None:
    output = runs["output"]
    assert "FSDP2 (fully_shard)" in output, output[-3000:]  # the model was sharded, not replicated
    two_rows = mp.read_rows(runs["two"] / "metrics.jsonl")
    assert [r["rollouts/trained"] for r in two_rows] == [8.0] * 3
    mp.assert_same_rows(runs["one_rows"], two_rows)  # loss, grad norm, entropy, reward: within 1e-5, every step
    assert all(r["kl"] >= 0 for r in two_rows) and two_rows[-1]["kl"] > 0
    # The engines sampled from the gathered weights of the current policy at every step.
    for r in two_rows:
        assert r["sampler/logp_diff_max"] < 1e-4, r
    final = load_checkpoint(runs["two"] / "checkpoints" / "step_0000003")
    for name, tensor in runs["one_weights"].items():
        torch.testing.assert_close(final["model"][name], tensor, rtol=0, atol=1e-5, msg=name)
    assert (runs["two"] / "final_model" / "config.json").is_file()


@pytest.mark.slow
def test_a_sharded_checkpoint_resumes_in_one_process(runs: dict[str, Any], tmp_path: Path,
                                                     dense_env_dir: Path) -> None:
    """FSDP 2 -> 1: the gathered checkpoint (model and Adam moments) is a single process's layout."""
    out = tmp_path / "resumed"
    shutil.copytree(runs["two"], out)
    trainer, rows = one_process(SETTINGS, out, resume=str(out / "checkpoints" / "step_0000002"))
    assert [r["step"] for r in rows] == [1, 2, 3]
    mp.assert_same_rows(runs["one_rows"], rows)
    for name, tensor in trainer.model.state_dict().items():
        torch.testing.assert_close(tensor, runs["one_weights"][name], rtol=0, atol=1e-5, msg=name)


@pytest.mark.slow
def test_a_one_process_checkpoint_resumes_sharded(runs: dict[str, Any], tmp_path: Path, dense_env_dir: Path) -> None:
    """1 -> FSDP 2, through ``accelerate launch --cpu --config_file examples/accelerate/fsdp.yaml``: accelerate
    starts one process without FSDP's settings, vf-train reads both from the launcher's command line and
    config file and relaunches 2 sharded processes; step 3 redone sharded equals both runs."""
    out = tmp_path / "resumed"
    shutil.copytree(runs["root"] / "one", out)
    toml = tmp_path / "r.toml"
    toml.write_text(mp.to_toml({**SETTINGS, "output_dir": str(out)}))
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--cpu", "--config_file", str(FSDP_YAML),
           "-m", "trainers.grpo.cli", str(toml), "--resume", str(out / "checkpoints" / "step_0000002")]
    code, output = launch(cmd, dense_env_dir, tmp_path / "r.log")
    assert code == 0, output[-4000:]
    assert "FSDP2 (fully_shard)" in output, output[-3000:]
    rows = mp.read_rows(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]
    mp.assert_same_rows(runs["one_rows"], rows)
    final = load_checkpoint(out / "checkpoints" / "step_0000003")["model"]
    for name, tensor in runs["one_weights"].items():
        torch.testing.assert_close(final[name], tensor, rtol=0, atol=1e-5, msg=name)


# -- settings ----------------------------------------------------------------------------------
def test_fsdp_settings_from_accelerate_env() -> None:
    from trainers.grpo.learn.fsdp import settings_from_env

    s = settings_from_env({"FSDP_VERSION": "2", "FSDP_AUTO_WRAP_POLICY": "TRANSFORMER_BASED_WRAP",
                           "FSDP_RESHARD_AFTER_FORWARD": "false", "FSDP_STATE_DICT_TYPE": "FULL_STATE_DICT"})
    assert s.wrap == "TRANSFORMER_BASED_WRAP" and not s.reshard_after_forward
    for env, message in [({"FSDP_VERSION": "1"}, "FSDP2"),
                         ({"FSDP_AUTO_WRAP_POLICY": "SIZE_BASED_WRAP"}, "TRANSFORMER_BASED_WRAP"),
                         ({"FSDP_STATE_DICT_TYPE": "SHARDED_STATE_DICT"}, "FULL_STATE_DICT"),
                         ({"FSDP_ACTIVATION_CHECKPOINTING": "true"}, "gradient_checkpointing")]:
        with pytest.raises(ConfigError, match=message):
            settings_from_env(env)


def test_cpu_launch_of_an_fsdp_config_relaunches_sharded() -> None:
    """``accelerate launch --cpu`` starts one process and passes neither the count nor FSDP on; both
    are read from the launcher's arguments and config file."""
    from trainers.grpo.dist import launch as dist_launch

    cmd = ["python", "-m", "accelerate.commands.launch", "--cpu", "--config_file", str(FSDP_YAML), "-m",
           "trainers.grpo.cli", "c.toml"]
    assert dist_launch.launcher_num_processes(cmd) == 2 and dist_launch.launcher_wants_fsdp(cmd)
    assert dist_launch.launcher_wants_fsdp(["accelerate", "launch", "--cpu", "--use_fsdp", "x.py"])
    assert not dist_launch.launcher_wants_fsdp(["accelerate", "launch", "--cpu", "--num_processes", "2", "x.py"])
    args = ["c.toml", "--fsdp", "--seed", "1"]
    assert dist_launch.pop_fsdp(args) and args == ["c.toml", "--seed", "1"]


def test_vf_train_fsdp_needs_several_processes(capsys: pytest.CaptureFixture[str]) -> None:
    from trainers.grpo.cli import main

    assert main(["c.toml", "--fsdp"]) == 2
    assert "--num_processes N" in capsys.readouterr().err


# -- the learner on a fixed batch, ranks with different micro-batch counts ----------------------
def _micro_batch_counts(vocab: int, budget: int, seed: int) -> list[int]:
    """How many micro-batches each of 2 ranks plans for its share of `mp_learner_step`'s batch."""
    from trainers.grpo.data.batch import collate
    from trainers.grpo.data.microbatch import micro_batches
    from trainers.grpo.data.sampler import rank_groups

    helper = mp.load_helper()
    counts = []
    for rank in range(2):
        batch = collate(helper.fixed_rows(vocab, rank_groups(helper.GROUPS, rank, 2)), 0)
        counts.append(len(micro_batches(batch, budget, generator=torch.Generator().manual_seed(seed * 100_003))))
    return counts


@pytest.mark.slow
def test_sharded_learner_step_with_uneven_micro_batches_equals_one_process(
    tmp_path: Path, dense_env_dir: Path, base_model_dir: Path, train_config: Any
) -> None:
    """A fixed batch of 4 groups whose 2 halves plan different numbers of micro-batches: the
    rank with fewer pads its passes (FSDP's collectives must pair up) and the padding counts
    zero, so loss, grad norm and the weights after the step equal one process's (KL on: the
    sharded reference pads too)."""
    import json

    vocab = json.loads((base_model_dir / "config.json").read_text())["vocab_size"]
    seed = train_config(tmp_path / "probe").seed
    budget = next(b for b in range(8, 80) if len(set(_micro_batch_counts(vocab, b, seed))) > 1)
    settings = {"prompts_per_step": 4, "learning_rate": 1e-2, "micro_batch_tokens": budget,
                "algorithm_overrides": {"beta": 0.04}}
    helper = mp.load_helper()
    before = torch.get_num_threads()
    try:
        one = helper.learner_step(mp.write_config(train_config(tmp_path / "one", **settings), tmp_path / "one.json"),
                                  tmp_path / "one")
    finally:
        torch.set_num_threads(before)
    cfg = mp.write_config(train_config(tmp_path / "two", **settings), tmp_path / "two.json")
    code, output = accelerate_fsdp([str(HERE / "mp_learner_step.py"), str(cfg), str(tmp_path / "two")],
                                   dense_env_dir, tmp_path / "two.log")
    assert code == 0, output[-4000:]
    ranks = [json.loads((tmp_path / "two" / f"rank{r}.json").read_text()) for r in range(2)]
    for key in ("loss", "entropy", "grad_norm", "kl"):
        for r in ranks:
            assert r[key] == pytest.approx(one[key], abs=1e-5), key
    assert one["grad_norm"] > 1e-3
    want = torch.load(tmp_path / "one" / "params_rank0.pt")
    got = torch.load(tmp_path / "two" / "params_rank0.pt")
    for name, tensor in want.items():
        torch.testing.assert_close(got[name], tensor, rtol=0, atol=1e-4, msg=name)  # see test_multiprocess


# -- LoRA under FSDP ---------------------------------------------------------------------------
@pytest.mark.slow
def test_lora_with_kl_sharded_trains_like_one_process(tmp_path: Path, dense_env_dir: Path) -> None:
    """peft adapters inside sharded decoder layers (the frozen base and the adapters in one FSDP
    unit), KL to the adapters-off base: 2 sharded processes equal 1 process step by step. Rank 0
    alone builds vf-tiny here, so the ranks' random streams differ when peft draws ``lora_A``:
    without rank 0's weights broadcast before sharding, the shards would be a patchwork."""
    settings = {**mp.SETTINGS, "max_steps": 2, "save_every": 2, "lora": True, "lora_r": 4, "lora_alpha": 8,
                "algorithm_overrides": {"beta": 0.04}, "lr_scheduler": "constant", "warmup_steps": 0}
    toml = tmp_path / "two.toml"
    toml.write_text(mp.to_toml({**settings, "output_dir": str(tmp_path / "two")}))
    code, output = accelerate_fsdp(["-m", "trainers.grpo.cli", str(toml)], dense_env_dir, tmp_path / "two.log")
    assert code == 0, output[-4000:]
    assert "FSDP2 (fully_shard)" in output, output[-3000:]
    trainer, one_rows = one_process(settings, tmp_path / "one")
    two_rows = mp.read_rows(tmp_path / "two" / "metrics.jsonl")
    mp.assert_same_rows(one_rows, two_rows)
    assert two_rows[-1]["kl"] > 0 and all(r["sampler/logp_diff_max"] < 1e-4 for r in two_rows)
    final = load_checkpoint(tmp_path / "two" / "checkpoints" / "step_0000002")["model"]
    adapters = {k: v for k, v in trainer.model.state_dict().items() if "lora_" in k}
    assert adapters
    for name, tensor in adapters.items():
        torch.testing.assert_close(final[name], tensor, rtol=0, atol=1e-5, msg=name)


def test_ray_under_fsdp_is_refused_with_the_alternative(monkeypatch: pytest.MonkeyPatch) -> None:
    """Checked before any model is loaded (rank 1 of 2, without a process group)."""
    from trainers.grpo.dist.ranks import Dist
    from trainers.grpo.learn.policy import fsdp_settings

    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    ray = load_config(None, {**SETTINGS, "ray": {}, "output_dir": "unused"})
    with pytest.raises(ConfigError, match=r"\[ray\] rollouts with FSDP"):
        fsdp_settings(ray, Dist(rank=1, world_size=2))
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "false")
    assert fsdp_settings(ray, Dist(rank=1, world_size=2)) is None
