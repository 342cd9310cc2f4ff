"""What flows through the engine: request and output types, and the errors it raises.

`Request` is one submitted request, `Seq` one of its ``n`` rows in the running batch, `Sink` the
way results get back to whichever thread or event loop submitted it. The output types are what
callers receive; `PrefillPlan` says where a step's new rows go.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from verifiers.errors import ConfigError, ServerError
from verifiers.inference.engine.sampling import RowSampling, SamplingParams

_SEQ_IDS = itertools.count()


class WeightMismatchError(ConfigError, RuntimeError):
    """New weights that do not fit the served model; nothing was copied.

    A `RuntimeError` too, as ``load_state_dict``'s error was, so existing callers still catch it.
    """


class InvalidRequestError(ConfigError):
    """A request the engine refuses before queueing it; ``param`` names the offending field.

    Every value that would index a device tensor (token ids) is checked here: one bad id
    inside a batched step would otherwise fail the step for every request sharing it.
    """

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


@dataclass(slots=True)
class SequenceOutput:
    """One generated choice."""

    index: int
    token_ids: list[int]
    text: str
    finish_reason: str  # "stop" | "length"
    stop_reason: str | int | None = None
    logprobs: list[float] | None = None
    top_logprobs: list[list[tuple[int, float]]] | None = None


@dataclass(slots=True)
class RequestOutput:
    prompt_token_ids: list[int]
    outputs: list[SequenceOutput]
    weight_version: int


@dataclass(slots=True)
class StreamDelta:
    """Streaming event: new text/tokens of choice ``index`` (``finish_reason`` set on its last delta)."""

    index: int
    text: str
    token_ids: list[int]
    logprobs: list[float]
    top_logprobs: list[list[tuple[int, float]]]
    finish_reason: str | None = None
    stop_reason: str | int | None = None


class Sink:
    """Delivers results to the caller's event loop or thread, whichever submitted.

    A streaming sink (``stream=True`` on an event loop) buffers what the engine thread pushes
    (deltas, then ``None`` at the end or the exception) and wakes its reader at most once per
    batch: `take` returns everything ready, so a reader that fell behind catches up in one go
    instead of one event-loop callback per token. Inside `batched_wakeups` (one engine step)
    everything bound for one loop (results, failures, stream wake-ups) is sent in one callback.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop | None, stream: bool) -> None:
        self.loop = loop
        self.future: Any = loop.create_future() if loop is not None else concurrent.futures.Future()
        self.streaming = stream and loop is not None
        self.pending: deque[Any] = deque()  # appended by the engine thread, drained by `take`
        self._waiter: asyncio.Future[None] | None = None
        self._wake_queued = False

    def _call(self, fn: Any) -> None:
        if self.loop is None:
            fn()
            return
        batch: dict[Any, list[Any]] | None = getattr(_step_calls, "calls", None)
        if batch is not None:
            batch.setdefault(self.loop, []).append(fn)
        elif not self.loop.is_closed():
            self.loop.call_soon_threadsafe(fn)

    def resolve(self, value: Any) -> None:
        def done() -> None:
            if not self.future.done():
                self.future.set_result(value)

        self._call(done)
        if self.streaming:
            self._put(None)

    def fail(self, exc: BaseException) -> None:
        def done() -> None:
            if not self.future.done():
                self.future.set_exception(exc)

        self._call(done)
        if self.streaming:
            self._put(exc)

    def push(self, delta: StreamDelta) -> None:
        if self.streaming:
            self._put(delta)

    def _put(self, item: Any) -> None:
        """Engine thread: buffer ``item``; ask the reader's loop to wake it unless a wake-up is on its way."""
        self.pending.append(item)
        if self._wake_queued:
            return
        self._wake_queued = True
        self._call(self._wake)

    def _wake(self) -> None:
        """Reader's loop: let `take` return (the flag is cleared first, so a later push queues a new wake-up)."""
        self._wake_queued = False
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def take(self) -> list[Any]:
        """Everything pushed since the last call (waiting for at least one item)."""
        assert self.loop is not None
        while not self.pending:
            self._waiter = self.loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        items = []
        while self.pending:  # popleft, not a copy and clear: the engine thread may append meanwhile
            items.append(self.pending.popleft())
        return items


_step_calls = threading.local()


def _run_all(loop: asyncio.AbstractEventLoop, calls: list[Any]) -> None:
    for fn in calls:
        try:
            fn()
        except Exception as exc:  # one caller's failure is reported, never another caller's lost result
            loop.call_exception_handler({"message": "engine result delivery failed", "exception": exc})


@contextlib.contextmanager
def batched_wakeups() -> Iterator[None]:
    """Engine thread: what this block sends to event loops goes in one callback per loop, in order.

    One engine step pushes a token to every running stream and, at the end of a GRPO batch,
    resolves every request at once; one ``call_soon_threadsafe`` per loop per step instead of
    one per request keeps the loop free for its work (64 results in one wake-up, not 64).
    """
    calls: dict[Any, list[Any]] = {}
    _step_calls.calls = calls
    try:
        yield
    finally:
        _step_calls.calls = None
        for loop, group in calls.items():
            if not loop.is_closed():
                loop.call_soon_threadsafe(_run_all, loop, group)


@dataclass(slots=True, eq=False)
class Request:
    prompt_ids: list[int]
    params: SamplingParams
    n: int
    max_tokens: int
    sink: Sink
    forced: list[int]
    version: int = 0
    seqs: list[Seq] = field(default_factory=list)
    remaining: int = 0
    cancelled: bool = False
    order: int = 0  # admission order: on an out-of-memory error the newest request is shed
    isolated: bool = False  # joined a step that failed: retried alone to find the culprit

    @property
    def worst(self) -> int:
        """Worst-case cache length of each of its rows: prompt + max_tokens."""
        return len(self.prompt_ids) + self.max_tokens


@dataclass(slots=True, eq=False)
class Seq:
    req: Request
    index: int
    row: RowSampling
    forced: list[int]
    used: int = 0  # cache columns this row occupies (left padding of its prefill group included)
    worst: int = 0  # the most columns it can reach: padded prompt + max_tokens
    uid: int = field(default_factory=lambda: next(_SEQ_IDS))  # unlike id(), never reused
    out: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top: list[list[tuple[int, float]]] = field(default_factory=list)
    text: str = ""
    streamed_chars: int = 0
    streamed_tokens: int = 0
    finish_reason: str | None = None
    stop_reason: str | int | None = None


@dataclass(slots=True, eq=False)
class PrefillPlan:
    """Where a step's new rows go: ``seqs`` in slot order from the first free slot."""

    seqs: list[Seq]
    prompts: list[tuple[int, ...]]
    groups: list[tuple[int, list[int], int]]  # (first slot, prompt indices, padded length)
    copies: list[tuple[int, int]]  # (source slot, destination slot) for rows sharing a prompt
    width: int  # the longest padded prompt



def oom_error(exc: BaseException) -> ServerError:
    """The error a request gets when the device ran out of memory while it ran."""
    return ServerError(
        f"the inference engine ran out of device memory while this request ran ({exc}); other requests "
        "continue. Lower max_kv_tokens (or max_prefill_tokens), or send fewer/shorter requests at once."
    )


def step_error(exc: BaseException) -> ServerError:
    """The error a request gets when a step failed because of it."""
    return ServerError(f"the inference engine failed on this request ({type(exc).__name__}: {exc}); "
                       "other requests continue")
