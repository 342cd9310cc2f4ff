"""A scripted, OpenAI-compatible HTTP server for tests and benchmarks.

Environment tests need a model that answers instantly, deterministically and on cue:
echo the user, call a tool with malformed arguments, fail the first two requests,
hang until the client times out, refuse an overlong prompt with vLLM's wording.
`ScriptedServer` does that over real HTTP on 127.0.0.1, so the code under test talks to
it through the same client stack (``openai``, retries, timeouts) it uses in production.

The script (`ServerScript`) is a pydantic model so it can cross a process boundary as
JSON (`ScriptedServer.spawn`), but it is compiled into plain objects once, and the
request path only touches dicts and strings: a throughput benchmark must measure the
client, not this server.

Tokenisation mimics a vLLM server without a tokenizer: one token per character, token
id ``ord(ch)``; a chat prompt is rendered as ``<|role|>content\\n`` per message followed
by ``<|assistant|>``. An assistant message's tool calls are rendered as
``json.dumps([{"name": ..., "arguments": ...}])`` right after its content, the same
text the server emits as the completion tokens of a tool-calling reply, so the prompt of
turn k+1 extends prompt + completion of turn k, as it does with a real chat template.

Run it standalone with ``python -m verifiers.testing.server --script script.json --port 8000``
(docs/evaluation.md: trying vf-eval offline against it).

Parts: the script and its renderers in `verifiers.testing.script`, the request handlers in
``verifiers.testing._app``, the child-process server in `verifiers.testing.spawn`; this module
serves the app from a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from types import TracebackType
from typing import Any

from verifiers.testing._app import HOST, ScriptedApp
from verifiers.testing._app import REQUEST_LOG_SIZE as REQUEST_LOG_SIZE
from verifiers.testing.script import ScriptedReply, ScriptedToolCall, ServerScript
from verifiers.testing.spawn import SpawnedServer, main, spawn_server

__all__ = [
    "ScriptedReply",
    "ScriptedServer",
    "ScriptedToolCall",
    "ServerScript",
    "SpawnedServer",
]

# -- in-process server -------------------------------------------------------------------


class ScriptedServer:
    """The scripted server on 127.0.0.1, served by a daemon thread with its own event loop.

    A separate loop keeps the server's work out of the caller's loop, so an async test or
    benchmark measures the client only. The thread is a daemon: a forgotten server dies
    with the process.
    """

    def __init__(self, script: ServerScript | None = None, port: int = 0) -> None:
        self._app = ScriptedApp(script if script is not None else ServerScript())
        self._requested_port = port
        self._port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle
    def start(self) -> ScriptedServer:
        """Start serving; returns once the socket listens."""
        if self._thread is not None:
            raise RuntimeError("ScriptedServer already started")
        ready = threading.Event()
        failure: list[BaseException] = []
        self._thread = threading.Thread(
            target=self._serve, args=(ready, failure), name="ScriptedServer", daemon=True
        )
        self._thread.start()
        ready.wait()
        if failure:
            self._thread.join()
            self._thread = None
            raise failure[0]
        return self

    def stop(self) -> None:
        """Stop serving; in-flight requests (e.g. scripted hangs) are cancelled."""
        thread, loop = self._thread, self._loop
        if thread is None or loop is None:
            return
        with contextlib.suppress(RuntimeError):  # loop already closed
            loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        self._thread = self._loop = None
        self._port = None

    def _serve(self, ready: threading.Event, failure: list[BaseException]) -> None:
        loop = asyncio.new_event_loop()
        try:
            runner, self._port = loop.run_until_complete(self._app.start_runner(self._requested_port))
        except BaseException as e:  # e.g. the port is taken: re-raised by start()
            failure.append(e)
            loop.close()
            ready.set()
            return
        self._loop = loop
        ready.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(runner.cleanup())
            _cancel_all(loop)
            loop.close()

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def __aenter__(self) -> ScriptedServer:
        return await asyncio.to_thread(self.start)

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.stop)

    # -- addresses
    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("ScriptedServer is not running; call start() first")
        return self._port

    @property
    def base_url(self) -> str:
        """The OpenAI client's ``base_url``: ``http://127.0.0.1:<port>/v1``."""
        return f"http://{HOST}:{self.port}/v1"

    # -- script and observations
    @property
    def script(self) -> ServerScript:
        return self._app.compiled.script

    def set_script(self, script: ServerScript) -> None:
        """Replace the script; requests already being answered keep the old one."""
        self._app.set_script(script)

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Bodies of the last 10,000 completion requests received (a snapshot)."""
        return list(self._app.request_log)

    @property
    def n_requests(self) -> int:
        return self._app.n_requests

    @property
    def n_errors(self) -> int:
        return self._app.n_errors

    @property
    def n_hangs(self) -> int:
        return self._app.n_hangs

    def stats(self) -> dict[str, int]:
        """The same counters as ``GET /stats``."""
        return self._app.stats()

    def reset(self) -> None:
        """Clear the request log and counters (the script's own state is kept)."""
        self._app.reset()

    @staticmethod
    def spawn(
        script: ServerScript | None = None,
        port: int = 0,
        *,
        max_lifetime_s: float = 3600.0,
        startup_timeout_s: float = 60.0,
    ) -> SpawnedServer:
        """Start the server in a child process (its own interpreter, its own core).

        Returns once the child listens. The child exits by itself when this process dies
        or after ``max_lifetime_s``.
        """
        return spawn_server(script, port, max_lifetime_s=max_lifetime_s, startup_timeout_s=startup_timeout_s)


def _cancel_all(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what still runs on a stopped loop (e.g. scripted hangs) and wait for it to end."""
    tasks = asyncio.all_tasks(loop)
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    loop.run_until_complete(loop.shutdown_asyncgens())


if __name__ == "__main__":
    # `ScriptedServer.spawn` runs this module. Run spawn's main, not a `__main__` copy of it, so
    # the script models are the canonical classes (pydantic resolves their annotations through sys.modules).
    main()
