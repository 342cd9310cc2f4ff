"""Fixtures for the vf-eval tests: environments, a header-recording server, the CLI as a process."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Self

import pytest
from aiohttp import web

import verifiers as vf

REPO = Path(__file__).resolve().parents[2]
REVERSE_TEXT_ROOT = REPO / "environments" / "reverse_text"
TEST_ENVS = Path(__file__).resolve().parent / "envs"
"""Holds ``vf_eval_test_echo`` (env id ``vf-eval-test-echo``)."""
REVERSE_ANSWER = "<think>reversing</think><answer>{reversed_last_user}</answer>"
"""A scripted reply that solves reverse-text exactly (reward 1.0 + 0.2 format)."""


def _exact(completion: vf.Messages, answer: str) -> float:
    texts = [m.get("content") or "" for m in completion if m.get("role") == "assistant"]
    return float(bool(texts) and texts[-1].strip() == answer)


_exact.__name__ = "exact"


def make_echo_env(n: int = 4, *, group_func: bool = False, **kwargs: Any) -> vf.SingleTurnEnv:
    """``n`` questions q0..q{n-1}; even ones are answered correctly by an echo server."""
    rows = [{"question": f"q{i}", "answer": f"q{i}" if i % 2 == 0 else "other"} for i in range(n)]
    rubric = vf.Rubric(funcs=[_exact])
    if group_func:

        @vf.group_reward
        def group_size(completions: list[Any]) -> list[float]:
            return [float(len(completions))] * len(completions)

        rubric.add_reward_func(group_size, weight=0.0)
    return vf.SingleTurnEnv(eval_dataset=rows, rubric=rubric, **kwargs)


@pytest.fixture
def importable_envs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``reverse-text`` and ``vf-eval-test-echo`` loadable in this process."""
    monkeypatch.syspath_prepend(str(REVERSE_TEXT_ROOT))
    monkeypatch.syspath_prepend(str(TEST_ENVS))


@pytest.fixture
def echo_env() -> Callable[..., vf.SingleTurnEnv]:
    return make_echo_env


def cli_env(extra_paths: list[Path] | None = None, **overrides: str) -> dict[str, str]:
    """A child-process environment with the repo and reverse-text importable, no ambient API key."""
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    paths = [str(REPO), str(REVERSE_TEXT_ROOT), str(TEST_ENVS), *(str(p) for p in extra_paths or [])]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.update(overrides)
    return env


def vf_eval_cmd() -> list[str]:
    """The installed console script when there is one, else the module (same code)."""
    script = Path(sys.executable).parent / "vf-eval"
    return [str(script)] if script.exists() else [sys.executable, "-m", "verifiers.cli.eval"]


def run_cli(
    args: list[str], *, cwd: Path, timeout: float = 60, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*vf_eval_cmd(), *args], cwd=cwd, env=cli_env(**env), capture_output=True, text=True, timeout=timeout
    )


def run_dirs(output_dir: Path) -> list[Path]:
    return sorted(p.parent for p in (output_dir / "evals").glob("*/*/metadata.json"))


def read_rows(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines() if line.strip()]


def read_meta(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "metadata.json").read_text())


class LoopbackApp:
    """An aiohttp app on 127.0.0.1 (a free port) in its own thread, for ``with``; stops on exit.

    Subclasses add their routes in ``add_routes``.
    """

    port = 0
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None

    def add_routes(self, app: web.Application) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        ready = threading.Event()

        def serve() -> None:
            loop = self._loop = asyncio.new_event_loop()
            app = web.Application()
            self.add_routes(app)
            runner = web.AppRunner(app, access_log=None)
            loop.run_until_complete(runner.setup())
            loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", 0).start())
            self.port = runner.addresses[0][1]
            ready.set()
            loop.run_forever()
            loop.run_until_complete(runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=serve, daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the test server did not start within 10 s")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)


class RecordingServer(LoopbackApp):
    """A minimal OpenAI-compatible chat server that records each request's headers.

    The scripted server logs bodies only; auth and custom headers need their own witness.
    """

    def __init__(self, reply: str = "hi") -> None:
        self.reply = reply
        self.headers: list[dict[str, str]] = []
        self.bodies: list[dict[str, Any]] = []

    echo_auth_error: bool = False
    """Answer 401 quoting the Authorization header, as some providers quote the key they got."""

    async def _chat(self, request: web.Request) -> web.Response:
        self.headers.append(dict(request.headers))
        self.bodies.append(await request.json())
        if self.echo_auth_error:
            message = f"Incorrect API key provided: {request.headers.get('Authorization', '')}"
            return web.json_response(
                {"error": {"message": message, "type": "invalid_request_error"}}, status=401
            )
        return web.json_response(
            {
                "id": "x",
                "object": "chat.completion",
                "created": 0,
                "model": "m",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": self.reply},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
        )

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self._chat)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


@pytest.fixture
def recording_server() -> Iterator[RecordingServer]:
    with RecordingServer() as srv:
        yield srv
