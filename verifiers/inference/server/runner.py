"""Run the embedded server: on a socket (uvicorn in a thread or the foreground) or in-process.

`EmbeddedServer` is what tests, demos and the trainer start: a real HTTP server on
127.0.0.1 (port 0 picks a free one) that stops with its context. `inprocess_client`
skips the socket entirely: an ``openai.AsyncOpenAI`` whose transport calls the ASGI app
in memory, for a trainer and its environments in one process.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Sequence
from typing import Any

from verifiers.clients.base import RequestAdapter
from verifiers.inference.engine import InferenceEngine
from verifiers.inference.server.api import EmbeddedAPI
from verifiers.inference.server.app import create_app


class EmbeddedServer:
    """The engine behind a uvicorn server in a background thread."""

    def __init__(
        self,
        engine: InferenceEngine,
        served_model_names: Sequence[str] = ("model",),
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | None = None,
    ) -> None:
        self.engine = engine
        self.names = list(served_model_names)
        self.host = host
        self._requested_port = port
        self.api_key = api_key
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None

    @property
    def port(self) -> int:
        if self._sock is None:
            raise RuntimeError("the server is not started")
        return int(self._sock.getsockname()[1])

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def start(self) -> EmbeddedServer:
        import uvicorn

        self.engine.start()
        app = create_app(self.engine, self.names, api_key=self.api_key)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self._requested_port))
        self._sock = sock
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off", timeout_keep_alive=30)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True,
                                        name="vf-embedded-server")
        self._thread.start()
        started = threading.Event()

        def wait() -> None:
            while not self._server.started and self._thread is not None and self._thread.is_alive():
                started.wait(0.01)

        wait()
        if not self._server.started:
            raise RuntimeError("the embedded server failed to start (see the log above)")
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._sock is not None:
            self._sock.close()
        self._thread = None
        self._server = None
        self.engine.stop()

    def __enter__(self) -> EmbeddedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def inprocess_client(
    engine: InferenceEngine, served_model_names: Sequence[str] = ("model",), *, max_retries: int = 0, timeout: float = 600.0
) -> Any:
    """An ``openai.AsyncOpenAI`` talking to ``engine`` through an in-memory ASGI transport.

    Nothing listens on a port. Use it from one event loop (the transport runs the app in
    the caller's loop); the engine thread does the model work.
    """
    import httpx2
    import openai

    engine.start()
    app = create_app(engine, served_model_names)
    http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://embedded", timeout=timeout)
    return openai.AsyncOpenAI(
        base_url="http://embedded/v1", api_key="EMPTY", http_client=http, max_retries=max_retries, timeout=timeout
    )


class EngineChatClient(RequestAdapter):
    """A rollout `ChatClient` that hands request bodies straight to the server's handlers.

    Same request bodies, validation, responses and errors as the HTTP API, minus HTTP and
    the ``openai`` SDK's request pipeline: for a trainer running environments and the engine
    in one process, where those cost more than generating a short completion.
    """

    def __init__(self, engine: InferenceEngine, served_model_names: Sequence[str] = ("model",)) -> None:
        engine.start()
        self.api = EmbeddedAPI(engine, served_model_names)

    async def _post(self, path: str, body: dict[str, Any], timeout: float | None) -> dict[str, Any]:
        import asyncio

        from verifiers.clients.base import error_for_status
        from verifiers.errors import ConfigError, ModelTimeoutError, OverlongPromptError
        from verifiers.inference.server.protocol import OpenAIError

        handler = self.api.chat if path == "/chat/completions" else self.api.completions
        body = {**body, "stream": False}
        try:
            async with asyncio.timeout(timeout):
                result = await handler(body)
        except OpenAIError as exc:
            raise error_for_status(exc.status, exc.message) from None
        except OverlongPromptError:
            raise
        except ConfigError as exc:
            raise error_for_status(400, str(exc)) from None
        except TimeoutError:
            raise ModelTimeoutError(f"no response within {timeout:g}s") from None
        if not isinstance(result, dict):  # pragma: no cover - stream is forced off above
            raise TypeError("expected a complete response")
        return result
