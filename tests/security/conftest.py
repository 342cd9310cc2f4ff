"""Fixtures for the hardening tests: a tiny served model, plain-socket HTTP helpers, and running a
command as an unprivileged user (`as_user.py`).

Servers listen on 127.0.0.1 (port 0) in a background thread and stop at teardown; tests
only ever signal processes they started themselves. Hub fixtures live in the hub test module.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest


def post_json(base: str, path: str, body: Any, *, timeout: float = 60.0,
              headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """One POST over http.client: ``(status, parsed JSON or raw text)``."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return request(base, "POST", path, timeout=timeout, body=data,
                   headers={"Content-Type": "application/json", **(headers or {})})


def request(base: str, method: str, path: str, *, timeout: float = 30.0, body: bytes | None = None,
            headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """One request over http.client: ``(status, parsed JSON or raw text)``."""
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        raw = resp.read()
    finally:
        conn.close()
    try:
        return resp.status, json.loads(raw)
    except ValueError:
        return resp.status, raw.decode(errors="replace")


def assert_openai_error(status: int, body: Any, expected_status: int, param: str | None = None) -> dict[str, Any]:
    """The body is OpenAI's ``{"error": {"message", "type", "param", "code"}}`` shape."""
    assert status == expected_status, (status, body)
    assert isinstance(body, dict) and isinstance(body.get("error"), dict), body
    err = body["error"]
    assert set(err) >= {"message", "type", "param", "code"}, err
    assert isinstance(err["message"], str) and err["message"]
    if param is not None:
        assert err["param"] == param, err
    return err


class ThreadServer:
    """``create_app(engine, ...)`` under uvicorn in a thread, on 127.0.0.1 with a free port."""

    def __init__(self, app: Any, **uvicorn_kw: Any) -> None:
        import uvicorn

        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        config = uvicorn.Config(app, log_level="error", access_log=False, lifespan="off", **uvicorn_kw)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        if not self.server.started:
            raise RuntimeError("test server did not start")
        self.base = f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from verifiers.models.tiny import TinyModelSpec, save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("sec-tiny") / "tiny", TinyModelSpec(seed=0))


@pytest.fixture(scope="module")
def engine(tiny_dir: Path) -> Iterator[Any]:
    import torch

    from verifiers.inference.engine import InferenceEngine

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    eng = InferenceEngine.from_pretrained(tiny_dir, max_batch_size=32, max_kv_tokens=16384)
    with eng:
        yield eng
    torch.set_num_threads(before)


@contextlib.contextmanager
def serving(engine: Any, **app_kw: Any) -> Iterator[ThreadServer]:
    pytest.importorskip("fastapi")
    from verifiers.inference.server.app import create_app

    srv = ThreadServer(create_app(engine, ["tiny"], **app_kw), timeout_keep_alive=5)
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="session")
def pid_namespace_problem() -> str | None:
    """Why a test cannot create its own PID namespace here (sandbox attacks run inside one), or None."""
    import shutil
    import subprocess
    import sys

    if sys.platform != "linux" or shutil.which("unshare") is None:
        return "needs Linux and util-linux's unshare"
    probe = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, timeout=30)
    return None if probe.returncode == 0 else f"cannot create a PID namespace here: {probe.stderr.decode()[:200]}"


NOBODY = 65534
AS_USER = Path(__file__).with_name("as_user.py")


def python_needs() -> list[str]:
    """What a child running this interpreter with this process's packages must reach: the
    interpreter, its installation and virtualenv, every ``sys.path`` entry and the ``verifiers``
    package (an editable install's finder maps it to the checkout, which need not be on ``sys.path``)."""
    import verifiers

    return [sys.executable, sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
            *(p for p in sys.path if p), str(Path(verifiers.__file__).parent)]


@pytest.fixture(scope="session")
def as_nobody(pid_namespace_problem: str | None) -> Callable[..., list[str]]:
    """``argv(command, needed)``: the command line that runs ``command`` as uid/gid 65534 (nobody) in
    a PID namespace of its own, with this interpreter (`python_needs`) and the paths in ``needed``
    reachable even where a parent directory is private (a checkout under ``mktemp -d``, a home
    directory, a pyenv under /root): `as_user.py`. Skips unless this is root on Linux and can make
    namespaces."""
    if pid_namespace_problem:
        pytest.skip(pid_namespace_problem)
    if os.geteuid() != 0:
        pytest.skip("running a command as another user needs root")

    def argv(command: Sequence[str], needed: Iterable[str] = ()) -> list[str]:
        paths = sorted({*python_needs(), *needed})
        return ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-I", str(AS_USER), str(NOBODY),
                json.dumps(paths), "--", *command]

    return argv
