"""`vf-vllm`: starts vLLM set up for RL, prints the URL, fails fast on what vLLM cannot serve, stops cleanly."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from verifiers.inference.vllm.admin import VLLMAdmin
from verifiers.inference.vllm.server import VLLMServer, VLLMServerSpec
from verifiers.models.tiny import TinyModelSpec, save_tiny_model

VF_VLLM = [sys.executable, "-m", "verifiers.cli.vllm"]


def test_unsupported_head_size_fails_fast_with_the_fix(tmp_path: Path, child_env: dict[str, str]) -> None:
    model = save_tiny_model(tmp_path / "m", TinyModelSpec())  # head size 16
    t0 = time.monotonic()
    proc = subprocess.run([*VF_VLLM, str(model), "--device", "cpu"], capture_output=True, text=True,
                          env=child_env, timeout=60)
    assert proc.returncode == 2
    assert "head size 16" in proc.stderr and "--hidden-size 128 --heads 2" in proc.stderr
    assert time.monotonic() - t0 < 30  # refused before starting vLLM


def test_missing_model_dir_is_a_clear_error(tmp_path: Path, child_env: dict[str, str]) -> None:
    proc = subprocess.run([*VF_VLLM, str(tmp_path / "nope")], capture_output=True, text=True, env=child_env,
                          timeout=60)
    assert proc.returncode == 2 and "config.json" in proc.stderr


def test_serves_for_training_and_stops_on_sigterm(vllm_model_dir: Path, tmp_path: Path,
                                                  child_env: dict[str, str]) -> None:
    log = tmp_path / "vllm.log"
    proc = subprocess.Popen(
        [*VF_VLLM, str(vllm_model_dir), "--port", "0", "--kv-cache-gib", "1", "--log-file", str(log),
         "--", "--enforce-eager", "--max-model-len", "512"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()  # printed once /health answers
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1"), url
        admin = VLLMAdmin(url)
        assert admin.served_models() == ["policy"]
        assert admin.is_vllm()
        assert admin.get("/is_paused") == {"is_paused": False}  # dev routes are on
        # RL settings reached vLLM: prefix caching and the checkpoint's dtype (raw logprobs, vLLM's
        # default mode, is checked against the model in test_vllm_rollouts).
        info = admin.get("/server_info")["vllm_config"]
        assert "enable_prefix_caching=True" in info and "dtype=torch.float32" in info
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(60)
    assert rc == 0
    # The whole server (API process and engine) is gone, and the port is closed.
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
        alive = True
    except OSError:
        alive = False
    assert not alive
    # vLLM's engine runs in child processes; their pids are in its log. None survives.
    pids = {int(p) for p in re.findall(r"\((?:EngineCore|Worker|VllmWorker-\d+) pid=(\d+)\)", log.read_text())}
    assert pids, "the log names vLLM's engine processes"
    deadline = time.monotonic() + 20
    while [p for p in pids if os.path.exists(f"/proc/{p}")] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in pids if os.path.exists(f"/proc/{p}")]


def _status(url: str, method: str = "GET", key: str | None = None) -> int:
    req = urllib.request.Request(url, method=method, data=b"{}" if method == "POST" else None,
                                 headers={"Content-Type": "application/json"})
    if key is not None:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_api_key_guards_every_route_not_only_v1(vllm_model_dir: Path, tmp_path: Path,
                                                server_spec: Callable[..., VLLMServerSpec]) -> None:
    """vLLM checks --api-key only under /v1; vf-vllm's guard covers the dev routes RL turns on."""
    spec = server_spec(vllm_model_dir, api_key="route-key")
    with VLLMServer(spec, log_path=tmp_path / "vllm.log") as server:
        root = server.base_url.removesuffix("/v1")
        for method, path in [("POST", "/collective_rpc"), ("POST", "/pause"), ("POST", "/sleep"),
                             ("POST", "/reset_prefix_cache"), ("GET", "/server_info"), ("GET", "/metrics"),
                             ("GET", "/is_paused"), ("GET", "/v1/models"), ("GET", "/openapi.json")]:
            assert _status(root + path, method) == 401, path
            assert _status(root + path, method, key="wrong") == 401, path
        assert _status(root + "/health") == 200  # what health checks poll stays open
        admin = VLLMAdmin(server.base_url, api_key="route-key")
        assert admin.get("/is_paused") == {"is_paused": False}  # the refused /pause had no effect
        assert admin.served_models() == ["policy"]
