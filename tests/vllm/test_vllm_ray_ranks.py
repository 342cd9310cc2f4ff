"""Two training processes with ``[ray]`` against a vLLM server (CPU build), launched for real.

``accelerate launch --cpu --num_processes 2`` on a config with ``[vllm]`` (rank 0 starts the
server) and ``[ray]`` (rank 0 starts a local 127.0.0.1 cluster, the rollout workers and the
store; rank 1 joins). The workers call vLLM themselves; after each step rank 0 alone pushes the
weights (`OneWriterSync`), every sync verified by the probe, and the store's policy version
moves once per step. An environment logs which process scored each rollout: every group was
scored whole by one rollout worker (neither training process), and no training, Ray worker or
vLLM process is left afterwards (by pid).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

ENV_ID = "vf-ray-ranks-vllm-env"
ENV_SOURCE = '''\
"""Test environment: reward = mean code point of the reply / 127; each scored rollout is logged
with the process that scored it."""
import json
import os

import verifiers as vf


def load_environment(log_path: str = "", num_examples: int = 16, **kwargs):
    def mean_code_point(prompt, completion):
        text = "".join(str(m.get("content") or "") for m in completion if m.get("role") == "assistant")
        with open(log_path, "a") as f:
            title = open("/proc/self/cmdline").read().split("\\0")[0]  # a Ray worker's: ray::ActorName...
            f.write(json.dumps({"pid": os.getpid(), "title": title, "prompt": prompt[-1]["content"]}) + "\\n")
        return sum(ord(c) for c in text) / (127 * len(text)) if text else 0.0

    rows = [{"question": f"Say {c}", "answer": c} for c in "abcdefghijklmnopqrstuvwxyz"[:num_examples]]
    return vf.SingleTurnEnv(dataset=rows, rubric=vf.Rubric(funcs=[mean_code_point]), **kwargs)
'''
PROMPTS, G, STEPS = 4, 4, 2


def config_text(out: Path, log: Path, shipped: dict[str, Any]) -> str:
    top = {"model": "tiny", "env_id": ENV_ID, "output_dir": str(out), "seed": 0, "prompts_per_step": PROMPTS,
           "num_generations": G, "max_tokens": 4, "temperature": 1.0, "learning_rate": 3e-3, "max_steps": STEPS,
           "save_every": 0, "torch_threads": 1, "sync_verify": True, "progress": False, "plot": False,
           "num_sample_completions": 0}
    tables = {"env_args": {"log_path": str(log)}, "tiny_model": shipped["tiny_model"], "vllm": shipped["vllm"],
              "ray": {"num_workers": 2, "worker_num_cpus": 0.5, "num_cpus": 2}}
    lines = [f"{k} = {json.dumps(v)}" for k, v in top.items()]
    for name, table in tables.items():
        lines += [f"[{name}]", *(f"{k} = {json.dumps(v)}" for k, v in table.items())]
    return "\n".join(lines) + "\n"


def test_two_processes_with_ray_workers_against_vllm_sync_once_per_step(
    tmp_path: Path, quickstart_vllm: Path, left_alive: Callable[..., dict[int, str]]
) -> None:
    import subprocess
    import tomllib

    env_dir = tmp_path / "env"
    env_dir.mkdir()
    (env_dir / f"{ENV_ID.replace('-', '_')}.py").write_text(ENV_SOURCE)
    out, log = tmp_path / "run", tmp_path / "scored.jsonl"
    config = tmp_path / "run.toml"
    config.write_text(config_text(out, log, tomllib.loads(quickstart_vllm.read_text())))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(env_dir), str(Path(__file__).resolve().parents[2]),
                                                    env.get("PYTHONPATH", "")) if p)
    env.update(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", TQDM_DISABLE="1", GLOO_SOCKET_IFNAME="lo")
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--cpu", "--num_processes", "2", "--num_machines",
           "1", "--mixed_precision", "no", "--dynamo_backend", "no", "-m", "trainers.grpo.cli", str(config)]
    procs: set[Any] = set()  # psutil.Process of each: a pid and its start time (pids wrap around in a CI run)
    with (tmp_path / "launch.log").open("w+") as output:
        proc = subprocess.Popen(cmd, stdout=output, stderr=subprocess.STDOUT, text=True, env=env,
                                start_new_session=True)
        deadline = time.monotonic() + 480
        try:
            while proc.poll() is None and time.monotonic() < deadline:  # every process of the run, while it lives
                with contextlib.suppress(psutil.Error):
                    procs |= set(psutil.Process(proc.pid).children(recursive=True))
                time.sleep(0.5)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, 9)  # timed out: the launch's own session only
            proc.wait()
        output.seek(0)
        text = output.read()
    assert proc.returncode == 0, text[-5000:]

    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    assert [r["policy_version"] for r in rows] == [1.0, 2.0]
    for r in rows:
        assert r["sync/probe_max_abs_diff"] <= 1e-3 and r["sync/ranks"] == 2.0, r  # rank 0 pushed, verified
        assert r["sync/replica_max_diff"] == 0.0 and r["staleness"] == 0.0, r
        assert r["rollouts/trained"] == PROMPTS * G and r["ray/retried_groups"] == 0.0, r  # the global batch
    by_prompt: dict[str, set[int]] = defaultdict(set)
    counts: dict[str, int] = defaultdict(int)
    for line in (json.loads(x) for x in log.read_text().splitlines() if x.strip()):
        assert line["title"].startswith("ray::RolloutWorker"), line  # scored by a worker, not a trainer
        by_prompt[line["prompt"]].add(line["pid"])
        counts[line["prompt"]] += 1
    assert len(by_prompt) == PROMPTS * STEPS and set(counts.values()) == {G}  # each group scored once, whole
    assert all(len(pids) == 1 for pids in by_prompt.values())  # ... by one process
    scorers = set().union(*by_prompt.values())
    assert scorers <= {p.pid for p in procs}, "groups were scored outside the run's Ray workers"
    ready = [ln for ln in text.splitlines() if "vLLM ready:" in ln]
    assert len(ready) == 1, text[-3000:]  # rank 0 alone started a server
    alive = left_alive(procs, timeout_s=30)
    assert not alive, f"left running: {alive}"
