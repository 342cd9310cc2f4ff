"""vf-serve under idle and slow connections: /health and chat latency, and every status, vs no load.

    python benchmarks/serve_idle_connections.py            # 1000 idle + 50 half-sent heads, default limits
    python benchmarks/serve_idle_connections.py --idle 300 --slow 10

Starts `vf-serve` on a tiny model (built with vf-tiny into a temp dir) on 127.0.0.1 with its
default connection settings (``--limit-concurrency 1024``, ``--max-connections-per-client 256``,
``--connection-reserve 32``, ``--header-timeout 10``). It measures ``GET /health`` and a 2-token
chat completion first with no other connection open (the baseline), then while ``--idle``
connections that send nothing and ``--slow`` connections that send half a request head are open
(all from 127.0.0.1, so the per-client cap applies to them and to the measuring client alike),
then once more after the header timeout. Before the guard, about a thousand idle connections
made every request, ``/health`` included, answer 503 for as long as they stayed open.

The LAST stdout line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _request(port: int, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, float]:
    t = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        data = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
        status = conn.getresponse().status
    except OSError:
        status = 0  # refused or reset
    finally:
        conn.close()
    return status, time.perf_counter() - t


def _measure(port: int, n: int) -> dict[str, Any]:
    chat = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    health = [_request(port, "GET", "/health") for _ in range(n)]
    chats = [_request(port, "POST", "/v1/chat/completions", chat) for _ in range(max(1, n // 4))]
    return {
        "health_ok": sum(s == 200 for s, _ in health) / len(health),
        "health_p50_ms": round(1000 * statistics.median(t for _, t in health), 2),
        "health_max_ms": round(1000 * max(t for _, t in health), 2),
        "chat_ok": sum(s == 200 for s, _ in chats) / len(chats),
        "chat_p50_ms": round(1000 * statistics.median(t for _, t in chats), 2),
        "statuses": sorted({s for s, _ in health + chats}),
    }


def _open(port: int, n: int, head: bytes) -> list[socket.socket]:
    socks = []
    for _ in range(n):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            if head:
                s.sendall(head)
            socks.append(s)
        except OSError:
            break
    return socks


def _closed(sock: socket.socket) -> bool:
    sock.settimeout(0.05)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--idle", type=int, default=1000, help="connections that send nothing (default 1000)")
    ap.add_argument("--slow", type=int, default=50, help="connections that send half a request head (default 50)")
    ap.add_argument("--requests", type=int, default=40, help="/health requests per measurement (default 40)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="vf-serve-idle-") as tmp:
        model = Path(tmp) / "tiny"
        subprocess.run([sys.executable, "-m", "verifiers.cli.tiny", str(model)], check=True, capture_output=True)
        proc = subprocess.Popen([sys.executable, "-m", "verifiers.cli.serve", str(model), "--port", "0", "--quiet"],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
        socks: list[socket.socket] = []
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            port = int(line.strip().rsplit(":", 1)[1].split("/")[0])
            baseline = _measure(port, args.requests)
            socks = _open(port, args.idle, b"") + _open(port, args.slow, b"GET /health HTTP/1.1\r\nHo")
            opened = len(socks)
            loaded = _measure(port, args.requests)
            time.sleep(11)  # past the default 10 s header timeout
            left_open = sum(not _closed(s) for s in socks)
            after = _measure(port, args.requests)
        finally:
            for s in socks:
                s.close()
            proc.terminate()
            proc.wait(timeout=30)
    print(json.dumps({
        "idle": args.idle, "slow": args.slow, "opened": opened,
        "baseline": baseline, "under_load": loaded, "after_header_timeout": after,
        "load_connections_left_open_after_timeout": left_open,
        "health_p50_ratio_under_load": round(loaded["health_p50_ms"] / max(baseline["health_p50_ms"], 1e-3), 2),
    }))


if __name__ == "__main__":
    main()
