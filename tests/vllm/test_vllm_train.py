"""`vf-train` against real vLLM servers: learning, a verified sync every step, failover, kill and resume.

The runs use examples/configs/quickstart_vllm.toml as shipped (letter-repeat on a random tiny
model), with only the output directory, the step budget and the servers overridden.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from verifiers.inference.vllm.admin import VLLMAdmin
from verifiers.inference.vllm.server import VLLMServer, free_port, start_servers
from verifiers.models.tiny import save_tiny_model

REPO = Path(__file__).resolve().parents[2]
QUICKSTART_VLLM = REPO / "examples" / "configs" / "quickstart_vllm.toml"
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

STEPS = 200  # quickstart_vllm.toml's own max_steps: ~0.02 -> 0.99 (at its old 3e-3 learning rate an AVX-512 EPYC plateaued near 0.78 over steps 100-180)
QUIET = ["--progress", "false", "--plot", "false", "--num_sample_completions", "0"]


def vf_train(args: list[str], env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trainers.grpo.cli", str(QUICKSTART_VLLM), *args, *QUIET],
                          capture_output=True, text=True, env=env, timeout=timeout)


def metrics(out: Path) -> list[dict[str, Any]]:
    path = out / "metrics.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.is_file() else []


def assert_learned(rows: list[dict[str, Any]]) -> None:
    rewards = [r["reward"] for r in rows]
    first, last = sum(rewards[:10]) / 10, sum(rewards[-10:]) / 10
    assert first <= 0.2 and last >= 0.8, f"reward {first:.3f} -> {last:.3f}"


def assert_every_sync_verified(rows: list[dict[str, Any]]) -> None:
    assert all(r["sync/probe_max_abs_diff"] <= 1e-3 for r in rows)
    # The check can see a step: the probe moves by far more than the tolerance as the policy learns.
    assert max(r["sync/probe_change"] for r in rows) > 1e-2


# vLLM's CPU kernels and transformers, both float32, differ by up to a few 1e-4 on a probe logprob once a
# run has sharpened the model (2.4e-4 seen in CI): the trainer verifies every sync at 1e-3
# (`sync_probe.default_tolerance`); that the weights are the last sync's is shown by the weight version
# (first test) and by the base model differing from the trained one by more than this (LoRA test).
FINAL_TOL = 1e-3


def probe_matches_final_model(server_url: str, final_model: Path, served_name: str = "policy") -> float:
    from trainers.grpo.sync import probe as sync_probe
    from verifiers.inference.engine.loading import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer(final_model)
    ids = sync_probe.probe_token_ids(tok)
    served = VLLMAdmin(server_url).prompt_logprobs(served_name, ids)
    return sync_probe.compare(server_url, served, sync_probe.trainer_logprobs(model, ids)).max_abs_diff


@pytest.fixture
def model_dir(tmp_path: Path, tiny_vllm_spec: Any) -> Path:
    return save_tiny_model(tmp_path / "model", tiny_vllm_spec)


def test_learns_against_one_server_and_it_serves_the_final_model(model_dir: Path, tmp_path: Path,
                                                                   child_env: dict[str, str], server_spec: Any) -> None:
    out = tmp_path / "run"
    with VLLMServer(server_spec(model_dir), log_path=tmp_path / "vllm.log") as server:
        proc = vf_train(["--vllm", "null", "--model", str(model_dir), "--base_url", server.base_url,
                         "--output_dir", str(out), "--max_steps", str(STEPS), "--save_every", "0"], child_env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        rows = metrics(out)
        assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
        assert_learned(rows)
        assert_every_sync_verified(rows)
        assert all(r["rollouts/errors"] == 0 for r in rows)
        # After training, vLLM serves exactly the weights in output_dir/final_model.
        assert probe_matches_final_model(server.base_url, out / "final_model") <= FINAL_TOL
        assert VLLMAdmin(server.base_url).weight_version() == str(STEPS)


def test_trains_against_two_managed_servers(tmp_path: Path, child_env: dict[str, str]) -> None:
    # Learning against vLLM is proven with one server above (200 steps); with two, what is new is the
    # pair of managed servers, every sync reaching and verified on both, and both doing real work,
    # which a short run shows. (A full learning run here cost ~4 minutes of the CI budget.)
    out, steps = tmp_path / "run", 16
    proc = vf_train(["--output_dir", str(out), "--max_steps", str(steps), "--save_every", "0",
                     "--vllm.num_servers", "2", "--vllm.cpu_cores", '["0", "1"]'], child_env, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = metrics(out)
    assert len(rows) == steps
    assert_every_sync_verified(rows)
    assert all(r["sync/servers"] == 2 for r in rows)
    counts = [v for k, v in rows[-1].items() if k.startswith("servers/") and k.endswith("/requests")]
    assert len(counts) == 2 and min(counts) > 0.25 * sum(counts), counts  # both replicas did real work
    # The managed servers are gone with the run.
    for log in sorted((out / "vllm").glob("vllm-*.log")):
        assert "Application startup complete" in log.read_text()


def _wait_rows(out: Path, proc: subprocess.Popen[str], n: int, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while len(metrics(out)) < n:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        assert time.monotonic() < deadline, "training made no progress"
        time.sleep(0.2)


def test_killed_server_stops_with_a_clear_error_and_resume_finishes(model_dir: Path, tmp_path: Path,
                                                                    child_env: dict[str, str], server_spec: Any) -> None:
    out, port, steps = tmp_path / "run", free_port(), 16
    args = ["--vllm", "null", "--model", str(model_dir), "--output_dir", str(out), "--max_steps", str(steps),
            "--save_every", "4", "--base_url", f"http://127.0.0.1:{port}/v1"]
    server = VLLMServer(server_spec(model_dir, port=port), log_path=tmp_path / "vllm-a.log").start()
    proc = subprocess.Popen([sys.executable, "-m", "trainers.grpo.cli", str(QUICKSTART_VLLM), *args, *QUIET],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env)
    try:
        _wait_rows(out, proc, 6)
        server.kill()
        _, err = proc.communicate(timeout=300)
    finally:
        server.stop()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err[-3000:]
    assert f"127.0.0.1:{port}" in err and "--resume" in err and "Traceback" not in err
    stopped_at = len(metrics(out))
    assert 6 <= stopped_at < steps
    # A new server on the same address; the run continues from its checkpoint to the end.
    with VLLMServer(server_spec(model_dir, port=port), log_path=tmp_path / "vllm-b.log") as server2:
        proc2 = vf_train([*args, "--resume"], child_env)
        assert proc2.returncode == 0, proc2.stderr[-3000:]
        rows = metrics(out)
        assert [r["step"] for r in rows] == list(range(1, steps + 1))  # nothing lost, nothing twice
        assert_every_sync_verified([r for r in rows if r["step"] > stopped_at])
        assert probe_matches_final_model(server2.base_url, out / "final_model") <= FINAL_TOL


def test_a_dead_replica_fails_over_to_the_other(model_dir: Path, tmp_path: Path,
                                                child_env: dict[str, str], server_spec: Any) -> None:
    out, steps = tmp_path / "run", 14
    servers = start_servers([server_spec(model_dir, cpu_cores="0"), server_spec(model_dir, cpu_cores="1")],
                            log_dir=tmp_path / "logs")
    try:
        urls = ",".join(s.base_url for s in servers)
        proc = subprocess.Popen(
            [sys.executable, "-m", "trainers.grpo.cli", str(QUICKSTART_VLLM), "--vllm", "null", "--model",
             str(model_dir), "--output_dir", str(out), "--max_steps", str(steps), "--base_url", urls, *QUIET],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env)
        _wait_rows(out, proc, 4)
        servers[1].kill()
        stdout, stderr = proc.communicate(timeout=600)
        assert proc.returncode == 0, stderr[-3000:]
    finally:
        for s in servers:
            s.stop()
    rows = metrics(out)
    assert [r["step"] for r in rows] == list(range(1, steps + 1))
    assert rows[0]["sync/servers"] == 2 and rows[-1]["sync/servers"] == 1
    assert "is down" in stdout
    assert_every_sync_verified(rows)
    # No rollout was lost: requests that hit the dead server were answered by the live one.
    assert sum(r["rollouts/errors"] for r in rows) == 0


def test_a_server_on_another_checkpoint_is_refused_then_a_v1_taskset_trains_on_its_own(
        model_dir: Path, tmp_path: Path, child_env: dict[str, str], tiny_vllm_spec: Any, server_spec: Any) -> None:
    """The first check runs before any sample is drawn: a server started on other weights fails it.
    The same server then trains the model it does serve on a verifiers-v1 taskset (add-tool: a
    Toolset, a reward and a metric), every sync verified and the taskset's scores logged by name
    (one server start for both: vLLM's start is most of a test's time here)."""
    other = save_tiny_model(tmp_path / "other", tiny_vllm_spec.model_copy(update={"seed": 1}))
    out, v1_out = tmp_path / "run", tmp_path / "v1"
    v1_env = {**child_env, "PYTHONPATH": os.pathsep.join(
        [str(REPO / "environments" / "add_tool"), *filter(None, [child_env.get("PYTHONPATH")])])}
    # Tool calls parsed as vf-vllm's default does (a taskset with a Toolset sends tools), and room for
    # the tool's schema in the prompt (the tiny tokenizer spends a token a character).
    spec = server_spec(other, tool_call_parser="hermes")
    spec.extra_args = ["--enforce-eager", "--max-model-len", "2048"]
    with VLLMServer(spec, log_path=tmp_path / "vllm.log") as server:
        proc = vf_train(["--vllm", "null", "--model", str(model_dir), "--base_url", server.base_url,
                         "--output_dir", str(out), "--max_steps", "3"], child_env)
        v1 = vf_train(["--vllm", "null", "--model", str(other), "--base_url", server.base_url, "--env_id", "add-tool",
                       "--env_args", json.dumps({"num_tasks": 16, "agent": {"max_turns": 2}}), "--max_tokens", "8",
                       "--prompts_per_step", "2", "--num_generations", "4", "--max_steps", "2",
                       "--output_dir", str(v1_out), "--save_every", "0"], v1_env)
    assert proc.returncode == 1
    assert "does not serve the trained weights" in proc.stderr and "probe" in proc.stderr
    assert "policy version 0" in proc.stderr
    assert metrics(out) == []  # not one step trained on the wrong policy's samples
    assert v1.returncode == 0, v1.stderr[-3000:]
    rows = metrics(v1_out)
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        assert {"rewards/correct", "rewards/used_tool"} <= set(row), sorted(row)
        assert row["sync/probe_max_abs_diff"] <= 1e-3 and row["rollouts/errors"] == 0


def test_lora_syncs_the_adapter_only_and_is_verified(model_dir: Path, tmp_path: Path,
                                                     child_env: dict[str, str], server_spec: Any) -> None:
    out, steps = tmp_path / "run", 5
    with VLLMServer(server_spec(model_dir, enable_lora=True), log_path=tmp_path / "vllm.log") as server:
        proc = vf_train(["--vllm", "null", "--model", str(model_dir), "--base_url", server.base_url,
                         "--output_dir", str(out), "--max_steps", str(steps), "--lora", "true",
                         "--weight_sync", "lora", "--learning_rate", "1e-2"], child_env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        admin = VLLMAdmin(server.base_url)
        assert "policy-lora" in admin.served_models()  # requests went to the adapter
        rows = metrics(out)
        assert len(rows) == steps and all(r["rollouts/errors"] == 0 for r in rows)
        assert_every_sync_verified(rows)
        # The base weights stayed as they were; base + the served adapter is the trained (merged) model.
        assert probe_matches_final_model(server.base_url, out / "final_model", "policy-lora") <= FINAL_TOL
        assert probe_matches_final_model(server.base_url, out / "final_model", "policy") > 1e-3


def test_generation_ahead_pauses_around_each_sync(model_dir: Path, tmp_path: Path,
                                                  child_env: dict[str, str], server_spec: Any) -> None:
    """``num_batches_ahead = 1``: requests in flight finish under the old weights, the next ones wait
    for the new weights, and the check still runs (after resuming: a paused server holds it back)."""
    out, steps = tmp_path / "run", 8
    with VLLMServer(server_spec(model_dir), log_path=tmp_path / "vllm.log") as server:
        proc = vf_train(["--vllm", "null", "--model", str(model_dir), "--base_url", server.base_url,
                         "--output_dir", str(out), "--max_steps", str(steps), "--num_batches_ahead", "1"],
                        child_env, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert VLLMAdmin(server.base_url).get("/is_paused") == {"is_paused": False}
    rows = metrics(out)
    assert [r["step"] for r in rows] == list(range(1, steps + 1))
    assert all(r["rollouts/errors"] == 0 and r["staleness"] <= 1 for r in rows)
    assert any(r["staleness"] == 1 for r in rows)  # batches really were generated ahead
    assert_every_sync_verified(rows)
