"""Measure /health latency during one large chat body, and vf-serve's peak RSS (a script, not a test).

Usage: python tests/security/measure_limits.py REPO MODEL_DIR BODY_MB [vf-serve args...]
It starts vf-serve from REPO on 127.0.0.1, sends one chat body of BODY_MB megabytes while
polling /health, prints one JSON line, and stops the server it started.
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


def main() -> None:
    repo, model, size_mb = sys.argv[1], sys.argv[2], float(sys.argv[3])
    extra = sys.argv[4:]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"PYTHONPATH": repo, "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "verifiers.cli.serve", model, "--port", str(port), *extra],
                            cwd=repo, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def get(path: str, body: bytes | None = None, timeout: float = 300) -> tuple[int, bytes]:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        c.request("POST" if body else "GET", path, body=body, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, data

    def hwm_mb() -> float:
        for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM"):
                return int(line.split()[1]) / 1024
        return 0.0

    try:
        for _ in range(600):
            try:
                if get("/health")[0] == 200:
                    break
            except OSError:
                time.sleep(0.1)
        base = hwm_mb()
        content = "lorem ipsum " * int(size_mb * 1024 * 1024 / 12)
        body = json.dumps({"model": "tiny", "messages": [{"role": "user", "content": content}],
                           "max_tokens": 1}).encode()
        out: dict = {}

        def send() -> None:
            t0 = time.monotonic()
            status, data = get("/v1/chat/completions", body)
            out.update(status=status, seconds=time.monotonic() - t0, body=data[:160])

        worker = threading.Thread(target=send)
        worker.start()
        time.sleep(0.1)
        latencies = []
        while worker.is_alive():
            t0 = time.monotonic()
            get("/health")
            latencies.append(time.monotonic() - t0)
            time.sleep(0.05)
        worker.join()
        print(json.dumps({
            "body_mb": round(len(body) / 2**20, 2), "args": extra, "status": out["status"],
            "request_s": round(out["seconds"], 2), "health_max_s": round(max(latencies), 3) if latencies else None,
            "health_samples": len(latencies), "rss_before_mb": round(base), "peak_rss_mb": round(hwm_mb()),
            "answer": out["body"].decode(errors="replace"),
        }))
    finally:
        proc.terminate()
        proc.wait(20)


if __name__ == "__main__":
    main()
