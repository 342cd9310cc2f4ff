"""Request size and event-loop limits of the embedded server.

Before the fix a 16 MB chat body took 40-50 s and several GB, and a 4 MB body froze
``/health`` for seconds: there was no body limit, and templating and tokenizing ran on
the event loop.
"""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from .conftest import assert_openai_error, post_json, request, serving

pytest.importorskip("torch")


def _read_response(sock: socket.socket, timeout: float) -> tuple[int, Any]:
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split()[1])
    length = int(next(h.split(b":")[1] for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")))
    while len(body) < length:
        body += sock.recv(65536)
    return status, json.loads(body)


@pytest.fixture(scope="module")
def small_limit(engine: Any):
    with serving(engine, max_request_bytes=100_000) as srv:
        yield srv


def test_declared_oversize_body_is_413_before_it_is_sent(small_limit: Any) -> None:
    """Only the headers go out; the answer must come without the server waiting for 50 MB."""
    port = int(small_limit.base.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 50000000\r\n\r\n{\"messages\": [")
        t0 = time.monotonic()
        status, body = _read_response(sock, timeout=5)
    assert time.monotonic() - t0 < 5
    assert_openai_error(status, body, 413)


def test_chunked_oversize_body_is_cut_off_with_413(small_limit: Any) -> None:
    host, port = small_limit.base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    payload = json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "x" * 300_000}]}).encode()
    conn.request("POST", "/v1/chat/completions", body=iter([payload[i:i + 16384] for i in range(0, len(payload), 16384)]),
                 headers={"Content-Type": "application/json"}, encode_chunked=True)
    resp = conn.getresponse()
    body = json.loads(resp.read())
    conn.close()
    assert_openai_error(resp.status, body, 413)


def test_overlong_text_is_refused_before_tokenizing(small_limit: Any, engine: Any) -> None:
    """Characters beyond what max_model_len tokens can hold: 400 naming 'messages', without the tokenizer."""
    api = small_limit.server.config.app.state.api
    text = "y" * (api.max_prompt_chars + 1)
    calls = []
    original = engine.tokenizer.__class__.__call__

    def counting(self: Any, *a: Any, **k: Any) -> Any:
        calls.append(1)
        return original(self, *a, **k)

    with serving(engine, max_request_bytes=len(text) + 10_000) as srv:
        engine.tokenizer.__class__.__call__ = counting
        try:
            status, body = post_json(srv.base, "/v1/chat/completions",
                                     {"model": "tiny", "messages": [{"role": "user", "content": text}]})
        finally:
            engine.tokenizer.__class__.__call__ = original
    assert_openai_error(status, body, 400, "messages")
    assert "maximum context length" in body["error"]["message"]
    assert calls == []


def test_health_answers_while_a_large_body_is_tokenized(tiny_dir: Path) -> None:
    """A 4 MB prompt that fits max_model_len is templated and tokenized off the event loop."""
    from verifiers.inference.engine import InferenceEngine

    big = InferenceEngine.from_pretrained(tiny_dir, max_model_len=10**8, max_kv_tokens=4096)
    content = "lorem ipsum " * (4 * 1024 * 1024 // 12)
    body = {"model": "tiny", "messages": [{"role": "user", "content": content}], "max_tokens": 1}
    with big, serving(big, max_request_bytes=8 * 1024 * 1024) as srv:
        done: dict[str, Any] = {}

        def send() -> None:
            t0 = time.monotonic()
            done["resp"] = post_json(srv.base, "/v1/chat/completions", body, timeout=120)
            done["seconds"] = time.monotonic() - t0

        worker = threading.Thread(target=send)
        worker.start()
        latencies = []
        time.sleep(0.2)  # the body is on its way
        while worker.is_alive():
            t0 = time.monotonic()
            status, _ = request(srv.base, "GET", "/health", timeout=60)
            latencies.append(time.monotonic() - t0)
            assert status == 200
            time.sleep(0.05)
        worker.join()
    status, resp = done["resp"]
    assert_openai_error(status, resp, 400, "messages")  # needs more KV tokens than the engine has
    assert done["seconds"] > 0.5 and len(latencies) >= 3, done  # the check below measured something
    assert max(latencies) < min(1.5, done["seconds"] / 4), (max(latencies), done["seconds"])


def test_empty_api_key_is_a_start_up_error(tiny_dir: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "verifiers.cli.serve", str(tiny_dir), "--api-key", ""],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "api-key" in proc.stderr and "empty" in proc.stderr


def test_create_app_refuses_an_empty_api_key(engine: Any) -> None:
    from verifiers.errors import ConfigError
    from verifiers.inference.server.app import create_app

    with pytest.raises(ConfigError):
        create_app(engine, ["tiny"], api_key="")


def _open_idle(port: int, n: int) -> list[socket.socket]:
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        socks.append(s)
    return socks


def _closed_by_server(sock: socket.socket) -> bool:
    sock.settimeout(0.5)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True  # reset


def test_idle_and_slow_connections_cannot_hold_vf_serve(tiny_dir: Path) -> None:
    """Before the fix, connections that sent nothing kept every client, /health included, at 503."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "verifiers.cli.serve", str(tiny_dir), "--port", "0", "--quiet",
         "--limit-concurrency", "64", "--max-connections-per-client", "32", "--connection-reserve", "8",
         "--header-timeout", "2", "--body-timeout", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    idle: list[socket.socket] = []
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "serving" in line, line + (proc.stderr.read() if proc.stderr else "")
        base = line.strip().rsplit(" ", 1)[1].removesuffix("/v1")
        port = int(base.rsplit(":", 1)[1])
        idle = _open_idle(port, 120)  # a bounded flood: twice the concurrency limit, all idle
        slow = socket.create_connection(("127.0.0.1", port), timeout=5)
        slow.sendall(b"GET /health HTTP/1.1\r\nHo")  # a head that never completes
        idle.append(slow)
        trickle = socket.create_connection(("127.0.0.1", port), timeout=5)
        trickle.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        b"Content-Length: 1000\r\n\r\n{\"model\"")  # a body that never completes
        idle.append(trickle)
        t0 = time.monotonic()
        assert request(base, "GET", "/health", timeout=10)[0] == 200
        status, body = post_json(base, "/v1/chat/completions", timeout=60, body={
            "model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        assert status == 200, body
        assert time.monotonic() - t0 < 30
        time.sleep(3)  # past the header and body timeouts: every idle or half-sent connection is gone
        still_open = [s for s in idle if not _closed_by_server(s)]
        assert not still_open, f"{len(still_open)} idle connections still open after the header timeout"
        assert request(base, "GET", "/health", timeout=10)[0] == 200
    finally:
        for s in idle:
            s.close()
        proc.terminate()
        proc.wait(timeout=30)
