"""Two training processes (``accelerate launch --cpu --num_processes 2``, gloo) against real vLLM servers.

What is new against one process is checked on real runs of a few steps, not learning (proven
once, docs/scaling.md): rank 0 alone starts the ``[vllm]`` server and stops it; every rank
generates its own whole groups (an environment here logs which rank scored which prompt);
one writer pushes the weights after each step, every sync verified by the probe on every
server, the ranks at the same version with equal replicas; a checkpoint of 2 processes resumes
in 1 and the other way round; with LoRA, the adapter loaded and probed on every replica, or the
merged weights after a resume; no training or vLLM process is left (checked by pid).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from verifiers.inference.vllm.admin import VLLMAdmin
from verifiers.inference.vllm.server import VLLMServer, free_port, start_servers
from verifiers.models.tiny import save_tiny_model

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ENV_ID = "vf-ddp-vllm-env"
ENV_SOURCE = '''\
"""Test environment: reward = mean code point of the reply / 127; each scored rollout is logged
with the training process (RANK, pid) that scored it, so a test sees who generated what."""
import json
import os
import re

import verifiers as vf


def load_environment(log_path: str = "", num_examples: int = 16, **kwargs):
    def mean_code_point(prompt, completion):
        text = "".join(str(m.get("content") or "") for m in completion if m.get("role") == "assistant")
        if log_path:
            line = {"rank": int(os.environ.get("RANK", "0")), "pid": os.getpid(), "prompt": prompt[-1]["content"]}
            with open(log_path, "a") as f:
                f.write(json.dumps(line) + "\\n")
        return sum(ord(c) for c in text) / (127 * len(text)) if text else 0.0

    rows = [{"question": f"Say {c}", "answer": c} for c in "abcdefghijklmnopqrstuvwxyz"[:num_examples]]
    return vf.SingleTurnEnv(dataset=rows, rubric=vf.Rubric(funcs=[mean_code_point]), **kwargs)
'''
PROMPTS, G = 4, 4  # per step: 2 groups of 4 rollouts per rank
QUIET = ["--progress", "false", "--plot", "false", "--num_sample_completions", "0"]


@pytest.fixture(scope="module")
def env_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ddp-env")
    (root / f"{ENV_ID.replace('-', '_')}.py").write_text(ENV_SOURCE)
    return root


def quickstart(path: Path) -> dict[str, Any]:
    import tomllib

    return tomllib.loads(path.read_text())


def settings(out: Path, log: Path, tiny: dict[str, Any], managed: dict[str, Any] | None) -> str:
    """A config file's text: quickstart_vllm.toml's model and server settings on the logging environment."""
    top: dict[str, Any] = {
        "model": "tiny", "env_id": ENV_ID, "output_dir": str(out), "seed": 0, "prompts_per_step": PROMPTS,
        "num_generations": G, "max_tokens": 4, "temperature": 1.0, "learning_rate": 3e-3, "save_every": 1,
        "keep_checkpoints": 4, "torch_threads": 1, "sync_verify": True,
    }
    lines = [f"{k} = {json.dumps(v)}" for k, v in top.items()]
    lines += ["[env_args]", f"log_path = {json.dumps(str(log))}", "[tiny_model]",
              *(f"{k} = {json.dumps(v)}" for k, v in tiny.items())]
    if managed is not None:
        lines += ["[vllm]", *(f"{k} = {json.dumps(v)}" for k, v in managed.items())]
    return "\n".join(lines) + "\n"


def child_env(env_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    repo = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(env_dir), repo, env.get("PYTHONPATH", "")) if p)
    env.update(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", TQDM_DISABLE="1", GLOO_SOCKET_IFNAME="lo")
    return env


def assert_servers_serve(servers: list[Any], final_model: Path, version: str) -> None:
    """Every server serves ``final_model``'s weights (probe logprobs within 1e-3) at weight ``version``."""
    from trainers.grpo.sync import probe as sync_probe
    from verifiers.inference.engine.loading import load_model_and_tokenizer

    trained, tok = load_model_and_tokenizer(final_model)
    ids = sync_probe.probe_token_ids(tok)
    for s in servers:
        served = VLLMAdmin(s.base_url).prompt_logprobs("policy", ids)
        assert sync_probe.compare(s.base_url, served, sync_probe.trainer_logprobs(trained, ids)).max_abs_diff <= 1e-3
        assert VLLMAdmin(s.base_url).weight_version() == version


def run(cmd: list[str], env: dict[str, str], log: Path, timeout_s: float = 420) -> tuple[int, str]:
    """Run a launch in its own session; on timeout kill that session only (the launcher and its ranks)."""
    with log.open("w+") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        out.seek(0)
        return code, out.read()


def launch_failure(output: str) -> str:
    """What the ranks printed before the launcher's own report, then which rank failed and how.

    The launcher prints its traceback twice at the end; a plain tail shows only that, hiding
    the step a rank reached and its last words (a CI failure must be readable from its log)."""
    cut = min((i for i in (output.find("torch.distributed.elastic"), output.find("Sending process")) if i >= 0),
              default=len(output))
    root = output[output.find("Root Cause"):][:600] if "Root Cause" in output else ""
    return f"{output[:cut][-4000:]}\n--- launcher ---\n{root}"


def two_processes(config: Path, args: list[str], env: dict[str, str], log: Path) -> tuple[int, str]:
    """``accelerate launch --cpu --num_processes 2 -m trainers.grpo.cli CONFIG ...``, as a user types it."""
    return run([sys.executable, "-m", "accelerate.commands.launch", "--cpu", "--num_processes", "2",
                "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                "-m", "trainers.grpo.cli", str(config), *args, *QUIET], env, log)


def one_process(config: Path, args: list[str], env: dict[str, str], log: Path) -> tuple[int, str]:
    return run([sys.executable, "-m", "trainers.grpo.cli", str(config), *args, *QUIET], env, log)


def metrics(out: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]


def scored(log: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in log.read_text().splitlines() if x.strip()]


def assert_synced(rows: list[dict[str, Any]], ranks: int, servers: int) -> None:
    """Every step's sync verified on every server by the probe, by one writer for ``ranks`` processes."""
    for r in rows:
        assert r["sync/probe_max_abs_diff"] <= 1e-3, r
        assert r["sync/servers"] == servers and r.get("sync/ranks", 1.0) == ranks, r
        if ranks > 1:
            assert r["sync/replica_max_diff"] == 0.0, r  # every rank's weights equal the verified writer's
        assert r["rollouts/trained"] == PROMPTS * G  # the global batch, not one rank's share
    assert max(r["sync/probe_change"] for r in rows) > 1e-3  # the probe sees the steps


def assert_whole_disjoint_groups(lines: list[dict[str, Any]], steps: int) -> None:
    """Both ranks scored, each prompt's G rollouts on one rank, the ranks' prompts disjoint."""
    by_prompt: dict[str, list[int]] = defaultdict(list)
    for line in lines:
        by_prompt[line["prompt"]].append(line["rank"])
    assert len(by_prompt) == PROMPTS * steps  # 16 prompts: no prompt twice in one epoch
    assert all(len(ranks) == G and len(set(ranks)) == 1 for ranks in by_prompt.values()), by_prompt
    per_rank = defaultdict(int)
    for ranks in by_prompt.values():
        per_rank[ranks[0]] += 1
    assert dict(per_rank) == {0: PROMPTS * steps // 2, 1: PROMPTS * steps // 2}


def assert_gone(pids: set[int]) -> None:
    """None of ``pids`` (nor a process in a group led by one) is alive."""
    import psutil

    alive = []
    for p in psutil.process_iter(["pid", "status"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and (p.pid in pids or os.getpgid(p.pid) in pids):
                alive.append(p.pid)
        except (psutil.Error, ProcessLookupError):
            continue
    assert not alive, f"left running: {alive}"


def training_pids(lines: list[dict[str, Any]]) -> set[int]:
    return {line["pid"] for line in lines}


def test_two_processes_start_one_managed_server_and_sync_it_every_step(
    tmp_path: Path, env_dir: Path, quickstart_vllm: Path
) -> None:
    shipped = quickstart(quickstart_vllm)
    out, log, steps = tmp_path / "run", tmp_path / "scored.jsonl", 3
    config = tmp_path / "run.toml"
    config.write_text(settings(out, log, shipped["tiny_model"], shipped["vllm"]))
    code, output = two_processes(config, ["--max_steps", str(steps)], child_env(env_dir), tmp_path / "launch.log")
    assert code == 0, launch_failure(output)
    rows = metrics(out)
    assert [r["step"] for r in rows] == list(range(1, steps + 1))
    assert_synced(rows, ranks=2, servers=1)
    lines = scored(log)
    assert_whole_disjoint_groups(lines, steps)
    # Rank 0 alone started a server (one log, one "ready" line), and it is gone with the run.
    ready = [ln for ln in output.splitlines() if "vLLM ready:" in ln]
    assert len(ready) == 1 and len(list((out / "vllm").glob("vllm-*.log"))) == 1, output[-3000:]
    server_pid = int(ready[0].rsplit("(pid ", 1)[1].split(")")[0])
    assert_gone({server_pid, *training_pids(lines)})


@pytest.fixture(scope="module")
def two_servers(tmp_path_factory: pytest.TempPathFactory, tiny_vllm_spec: Any,
                server_spec: Any) -> Iterator[tuple[Path, list[VLLMServer]]]:
    """Two vLLM servers (a core each) on one tiny model, started by the test, stopped by pid.

    ``--enable-lora``: the LoRA test loads its adapter on them; the base model is served as without it.
    """
    root = tmp_path_factory.mktemp("ddp-servers")
    model = save_tiny_model(root / "model", tiny_vllm_spec)
    servers = start_servers([server_spec(model, cpu_cores="0", port=free_port(), enable_lora=True),
                             server_spec(model, cpu_cores="1", port=free_port(), enable_lora=True)],
                            log_dir=root / "logs")
    try:
        yield model, servers
    finally:
        for s in servers:
            s.stop()
    assert_gone({s.pid for s in servers if s.pid is not None})


@pytest.fixture
def base_servers(two_servers: tuple[Path, list[VLLMServer]],
                 tmp_path: Path) -> tuple[Path, list[VLLMServer]]:
    """`two_servers` serving their model's own weights again (a test before may have synced trained ones)."""
    from safetensors.torch import save_file

    from trainers.grpo.sync.export import iter_export_weights
    from verifiers.inference.engine.loading import load_model_and_tokenizer

    model, servers = two_servers
    weights, _ = load_model_and_tokenizer(model)
    folder = tmp_path / "base_weights"
    folder.mkdir()
    save_file({n: t.contiguous() for n, t in iter_export_weights(weights, include_tied=True)},
              str(folder / "model.safetensors"), metadata={"format": "pt"})  # a tied head too (see sync/vllm.py)
    for s in servers:
        VLLMAdmin(s.base_url).reload_weights(str(folder))
        VLLMAdmin(s.base_url).reset_prefix_cache()
    return two_servers


def assert_each_replica_verified(rows: list[dict[str, Any]], servers: int) -> None:
    """The probe ran on every replica at every sync (one metric per server), each within the tolerance."""
    for r in rows:
        diffs = [r[f"servers/{i}/probe_max_abs_diff"] for i in range(servers)]
        assert max(diffs) <= 1e-3 and max(diffs) == r["sync/probe_max_abs_diff"], r


def test_lora_two_processes_push_the_adapter_to_every_replica_then_resume_merged(
    tmp_path: Path, env_dir: Path, quickstart_vllm: Path, base_servers: tuple[Path, list[VLLMServer]]
) -> None:
    """2 processes with LoRA, ``weight_sync = 'lora'``: rank 0 loads the adapter on both servers and
    probes each through it (steps 1-2); 1 process resumes with the adapter (step 3), then 2 processes
    with ``weight_sync = 'reload'``, the merged weights (step 4). Both servers end serving the final model."""
    model, servers = base_servers
    out, log = tmp_path / "run", tmp_path / "scored.jsonl"
    config = tmp_path / "run.toml"
    config.write_text(settings(out, log, quickstart(quickstart_vllm)["tiny_model"], None))
    env = child_env(env_dir)
    args = ["--model", str(model), "--base_url", ",".join(s.base_url for s in servers), "--lora", "true",
            "--learning_rate", "1e-2"]

    code, output = two_processes(config, [*args, "--weight_sync", "lora", "--max_steps", "2"], env,
                                 tmp_path / "a.log")
    assert code == 0, launch_failure(output)
    rows = metrics(out)
    assert [r["step"] for r in rows] == [1, 2]
    assert_synced(rows, ranks=2, servers=2)  # sync/replica_max_diff == 0.0: adapters equal on both ranks
    assert_each_replica_verified(rows, servers=2)
    for s in servers:  # the adapter is loaded on each replica, at the last step's version
        admin = VLLMAdmin(s.base_url)
        assert "policy-lora" in admin.served_models() and admin.weight_version() == "2"
    for r in rows:  # each rank sampled from the adapter on both replicas
        assert r["ranks/0/requests"] > 0 and r["ranks/1/requests"] > 0, r
        assert r["servers/0/requests"] > 0 and r["servers/1/requests"] > 0, r
    assert_whole_disjoint_groups(scored(log), 2)

    code, output = one_process(config, [*args, "--weight_sync", "lora", "--max_steps", "3", "--resume"], env,
                               tmp_path / "b.log")
    assert code == 0, launch_failure(output)
    code, output = two_processes(config, [*args, "--weight_sync", "reload", "--max_steps", "4", "--resume"], env,
                                 tmp_path / "c.log")
    assert code == 0, launch_failure(output)
    rows = metrics(out)
    assert [r["step"] for r in rows] == [1, 2, 3, 4]  # nothing lost, nothing twice
    assert_synced(rows[2:3], ranks=1, servers=2)
    assert_synced(rows[3:], ranks=2, servers=2)
    assert_each_replica_verified(rows[2:], servers=2)
    # The merged final model is what both servers serve under the base name now.
    assert_servers_serve(servers, out / "final_model", "4")
    assert_gone(training_pids(scored(log)))


def test_two_external_servers_and_resume_with_another_number_of_processes(
    tmp_path: Path, env_dir: Path, quickstart_vllm: Path, base_servers: tuple[Path, list[VLLMServer]]
) -> None:
    """2 processes train steps 1-2, 1 process resumes for step 3, 2 processes again for step 4."""
    model, servers = base_servers
    urls = ",".join(s.base_url for s in servers)
    out, log = tmp_path / "run", tmp_path / "scored.jsonl"
    config = tmp_path / "run.toml"
    config.write_text(settings(out, log, quickstart(quickstart_vllm)["tiny_model"], None))
    env = child_env(env_dir)
    args = ["--model", str(model), "--base_url", urls]

    code, output = two_processes(config, [*args, "--max_steps", "2"], env, tmp_path / "a.log")
    assert code == 0, launch_failure(output)
    first = scored(log)
    assert_whole_disjoint_groups(first, 2)
    code, output = one_process(config, [*args, "--max_steps", "3", "--resume"], env, tmp_path / "b.log")
    assert code == 0, launch_failure(output)
    code, output = two_processes(config, [*args, "--max_steps", "4", "--resume"], env, tmp_path / "c.log")
    assert code == 0, launch_failure(output)

    rows = metrics(out)
    assert [r["step"] for r in rows] == [1, 2, 3, 4]  # nothing lost, nothing twice
    assert_synced(rows[:2], ranks=2, servers=2)
    assert_synced(rows[2:3], ranks=1, servers=2)
    assert_synced(rows[3:], ranks=2, servers=2)
    for r in rows[:2] + rows[3:]:  # each rank generated through its own client, over both replicas
        assert r["ranks/0/requests"] > 0 and r["ranks/1/requests"] > 0, r
        assert r["servers/0/requests"] > 0 and r["servers/1/requests"] > 0, r
    lines = scored(log)
    step3 = lines[len(first): len(first) + PROMPTS * G]
    assert {ln["rank"] for ln in step3} == {0}  # the one-process step generated all groups itself
    assert_whole_disjoint_groups(lines[len(first) + PROMPTS * G:], 1)
    # Both servers serve the final weights, at the version of the last step.
    assert_servers_serve(servers, out / "final_model", "4")
    assert_gone(training_pids(lines))


def test_a_failed_check_on_rank_zero_stops_every_rank(
    tmp_path: Path, env_dir: Path, quickstart_vllm: Path, tiny_vllm_spec: Any, two_servers: tuple[Path, list[VLLMServer]]
) -> None:
    """The trainer holds other weights than the servers: rank 0's probe check fails before any sample,
    and rank 1, waiting for the outcome, stops with the same error instead of waiting forever."""
    _, servers = two_servers
    other = save_tiny_model(tmp_path / "other", tiny_vllm_spec.model_copy(update={"seed": 1}))
    out, log = tmp_path / "run", tmp_path / "scored.jsonl"
    config = tmp_path / "run.toml"
    config.write_text(settings(out, log, quickstart(quickstart_vllm)["tiny_model"], None))
    code, output = two_processes(config, ["--model", str(other), "--base_url", ",".join(s.base_url for s in servers),
                                          "--max_steps", "2"], child_env(env_dir), tmp_path / "launch.log")
    assert code != 0
    assert output.count("does not serve the trained weights") >= 2, output[-5000:]  # rank 0's error, and rank 1's
    assert "failed on rank 0" in output and "policy version 0" in output
    assert not (out / "metrics.jsonl").exists() or metrics(out) == []
    assert not log.exists()  # not one rollout generated on the wrong policy
    ranks = {int(p) for p in re.findall(r"\(pid: (\d+)\)", output)}  # torchrun's failure report names both
    assert len(ranks) == 2, output[-3000:]
    assert_gone(ranks)
