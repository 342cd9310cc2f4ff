"""The scripted server in a child process: `spawn_server`, the `SpawnedServer` handle, and the child's `main`.

A child has its own interpreter and core, so a benchmark's client and server do not share a GIL.
The child runs ``python -m verifiers.testing.server`` (whose ``__main__`` calls `main` here),
prints ``LISTENING <port>`` once it listens, and exits when its parent is gone or its lifetime
is over.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from verifiers.testing._app import HOST, ScriptedApp
from verifiers.testing.script import ServerScript


def spawn_server(
    script: ServerScript | None = None,
    port: int = 0,
    *,
    max_lifetime_s: float = 3600.0,
    startup_timeout_s: float = 60.0,
) -> SpawnedServer:
    """Start the server in a child process; returns once the child listens (see `ScriptedServer.spawn`)."""
    script_json = (script if script is not None else ServerScript()).model_dump_json()
    cmd = [
        sys.executable,
        "-m",
        "verifiers.testing.server",
        "--port",
        str(port),
        "--max-lifetime-s",
        str(max_lifetime_s),
        "--parent-pid",
        str(os.getpid()),
    ]
    # Command lines are limited (128 KiB per argument on Linux): big scripts go via stdin.
    via_stdin = len(script_json) > 32_000
    cmd += ["--script", "-"] if via_stdin else ["--script-json", script_json]
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE if via_stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
        env=_child_env(),
    )
    if via_stdin:
        assert proc.stdin is not None
        proc.stdin.write(script_json)
        proc.stdin.close()
    try:
        port = _read_port(proc, startup_timeout_s)
    except BaseException:
        _terminate(proc)
        raise
    return SpawnedServer(proc, port)


def _child_env() -> dict[str, str]:
    """The environment with this checkout first on PYTHONPATH, so the child runs this very code
    even when verifiers is not installed (e.g. tests run from a source tree)."""
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


# -- server in a child process -------------------------------------------------------------


class SpawnedServer:
    """Handle on a server started by `ScriptedServer.spawn`."""

    def __init__(self, proc: subprocess.Popen[str], port: int) -> None:
        self.proc = proc
        self.port = port

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}/v1"

    def stats(self, timeout_s: float = 5.0) -> dict[str, int]:
        """``GET /stats`` of the child: n_requests, n_errors, n_hangs."""
        with urllib.request.urlopen(f"http://{HOST}:{self.port}/stats", timeout=timeout_s) as resp:
            return json.loads(resp.read())

    def stop(self) -> None:
        """Terminate the child (kill it if it does not exit within 5 s)."""
        _terminate(self.proc)

    def __enter__(self) -> SpawnedServer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _terminate(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def _read_port(proc: subprocess.Popen[str], timeout_s: float) -> int:
    """Read the child's ``LISTENING <port>`` line without blocking past the timeout."""
    assert proc.stdout is not None
    lines: queue.Queue[str] = queue.Queue()
    stdout = proc.stdout
    threading.Thread(target=lambda: lines.put(stdout.readline()), daemon=True).start()
    try:
        line = lines.get(timeout=timeout_s)
    except queue.Empty:
        raise TimeoutError(f"scripted server did not start within {timeout_s} s") from None
    word, _, port = line.partition(" ")
    if word != "LISTENING":
        raise RuntimeError(f"scripted server failed to start (exit code {proc.wait()}); see its stderr")
    return int(port)


def script_summary(script: ServerScript, default: bool) -> str:
    """What the server will answer, for the person who started it (stderr; stdout is for spawn)."""
    if default:
        return ("replies with the default script: it echoes the last user message, so an environment that "
                "expects another answer or format scores 0 against it; script the replies with --script-json "
                """'{"replies": [{"content": "<answer>4</answer>"}]}' or --script FILE""")
    return f"replies with a script of {len(script.replies)} rule(s)"


async def _serve_until_stopped(
    script: ServerScript, port: int, max_lifetime_s: float, parent_pid: int | None, announce: str | None = None
) -> None:
    app = ScriptedApp(script)
    runner, bound = await app.start_runner(port)
    print(f"LISTENING {bound}", flush=True)
    if announce:
        print(f"scripted server on http://{HOST}:{bound}/v1 {announce}", file=sys.stderr, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):  # not on Windows
            loop.add_signal_handler(sig, stop.set)
    watcher = asyncio.create_task(_watch_parent(stop.set, max_lifetime_s, parent_pid))
    try:
        await stop.wait()
    finally:
        watcher.cancel()
        await runner.cleanup()


async def _watch_parent(stop: Callable[[], None], max_lifetime_s: float, parent_pid: int | None) -> None:
    """Stop when the parent process is gone (we get re-parented) or the lifetime is over."""
    parent = parent_pid if parent_pid is not None else os.getppid()
    deadline = time.monotonic() + max_lifetime_s if max_lifetime_s > 0 else float("inf")
    while os.getppid() == parent and time.monotonic() < deadline:
        await asyncio.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
    stop()


def main(argv: list[str] | None = None) -> None:
    """``python -m verifiers.testing.server``: serve a script until stopped (see the options)."""
    parser = argparse.ArgumentParser(
        prog="python -m verifiers.testing.server",
        description="Serve a scripted OpenAI-compatible API on 127.0.0.1.",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--script", help="path to a ServerScript JSON file ('-' reads stdin)")
    source.add_argument("--script-json", help="the ServerScript as a JSON string")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (printed on stdout)")
    parser.add_argument(
        "--max-lifetime-s", type=float, default=3600.0, help="exit after this many seconds (<= 0: never)"
    )
    parser.add_argument("--parent-pid", type=int, default=None, help="exit when this process is gone")
    args = parser.parse_args(argv)

    if args.script_json is not None:
        raw = args.script_json
    elif args.script == "-":
        raw = sys.stdin.read()
    elif args.script is not None:
        with open(args.script, encoding="utf-8") as f:
            raw = f.read()
    else:
        raw = "{}"
    script = ServerScript.model_validate_json(raw)
    asyncio.run(_serve_until_stopped(script, args.port, args.max_lifetime_s, args.parent_pid,
                                     announce=None if args.parent_pid else script_summary(script, raw == "{}")))
