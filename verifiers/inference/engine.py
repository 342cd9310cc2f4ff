"""A continuous-batching generation engine over a transformers causal LM.

Why not ``model.generate`` per request: 64 concurrent clients would cost 64 generations.
Here one background thread owns the model and runs decoding steps over every active
sequence at once, with a KV cache; between steps, newly arrived requests are prefilled and
joined to the batch and finished sequences leave it (continuous batching). Callers, on any
thread or event loop, submit token ids plus `SamplingParams` and get back token ids, text,
logprobs and a finish reason.

Weights can change under the engine: `paused()` stops it between steps so a trainer can
update parameters (in place when the model object is shared, or via `update_weights`),
and `weight_version` counts updates; every result carries the version it started under.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verifiers.errors import ConfigError, OverlongPromptError, ServerError
from verifiers.inference.kv import RowTable, SlotKV
from verifiers.inference.kv_budget import DEFAULT_PREFILL_TOKENS, Budget, default_kv_tokens
from verifiers.inference.sampling import RowSampling, SamplingParams

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


class _Sink:
    """Delivers results to the caller's event loop or thread, whichever submitted."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None, stream: bool) -> None:
        self.loop = loop
        self.future: Any = loop.create_future() if loop is not None else concurrent.futures.Future()
        self.queue: asyncio.Queue[Any] | None = asyncio.Queue() if (stream and loop is not None) else None

    def _call(self, fn: Any, *args: Any) -> None:
        if self.loop is None:
            fn(*args)
        elif not self.loop.is_closed():
            self.loop.call_soon_threadsafe(fn, *args)

    def resolve(self, value: Any) -> None:
        def done() -> None:
            if not self.future.done():
                self.future.set_result(value)

        self._call(done)
        if self.queue is not None:
            self._call(self.queue.put_nowait, None)

    def fail(self, exc: BaseException) -> None:
        def done() -> None:
            if not self.future.done():
                self.future.set_exception(exc)

        self._call(done)
        if self.queue is not None:
            self._call(self.queue.put_nowait, exc)

    def push(self, delta: StreamDelta) -> None:
        if self.queue is not None:
            self._call(self.queue.put_nowait, delta)


@dataclass(slots=True, eq=False)
class _Request:
    prompt_ids: list[int]
    params: SamplingParams
    n: int
    max_tokens: int
    sink: _Sink
    forced: list[int]
    version: int = 0
    seqs: list[_Seq] = field(default_factory=list)
    remaining: int = 0
    cancelled: bool = False
    order: int = 0  # admission order: on an out-of-memory error the newest request is shed
    isolated: bool = False  # joined a step that failed: retried alone to find the culprit

    @property
    def worst(self) -> int:
        """Worst-case cache length of each of its rows: prompt + max_tokens."""
        return len(self.prompt_ids) + self.max_tokens


@dataclass(slots=True, eq=False)
class _Seq:
    req: _Request
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


class InferenceEngine:
    """Owns a causal LM and serves generation requests with continuous batching.

    Use as a context manager (or `start`/`stop`). ``max_batch_size`` bounds the number of
    sequences decoded together; more requests wait their turn.

    Memory: ``max_kv_tokens`` bounds the KV cache, counted densely as rows x the longest row's
    worst case (prompt + max_tokens); a request is admitted, first come first served, only when
    its rows fit next to the running ones (`verifiers.inference.kv_budget`). ``None`` means
    ``max_batch_size * max_model_len``, capped on a GPU to half the memory free at construction.
    ``max_prefill_tokens`` bounds the new tokens one prefill forward processes (long prompts are
    prefilled in chunks). The cache is preallocated and written in place (`verifiers.inference.kv.SlotKV`).
    An out-of-memory error fails only the newest request; the others continue.

    ``logprobs_mode="raw"``
    (vLLM's default) reports log-softmax of the model's logits, before temperature and
    filtering, which is what a trainer compares its own log-probabilities against.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        max_batch_size: int = 256,
        max_model_len: int | None = None,
        seed: int = 0,
        logprobs_mode: str = "raw",
        max_kv_tokens: int | None = None,
        max_prefill_tokens: int = DEFAULT_PREFILL_TOKENS,
    ) -> None:
        import torch

        if logprobs_mode not in ("raw", "processed"):
            raise ConfigError(f"logprobs_mode must be 'raw' or 'processed', got {logprobs_mode!r}")
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.max_model_len = int(max_model_len or getattr(model.config, "max_position_embeddings", 2048))
        self.logprobs_mode = logprobs_mode
        self.device = next(model.parameters()).device
        if max_kv_tokens is not None and max_kv_tokens < 1:
            raise ConfigError(f"max_kv_tokens must be >= 1, got {max_kv_tokens}")
        if max_prefill_tokens < 1:
            raise ConfigError(f"max_prefill_tokens must be >= 1, got {max_prefill_tokens}")
        self.max_kv_tokens = int(max_kv_tokens or default_kv_tokens(model, self.device, max_batch_size,
                                                                      self.max_model_len))
        self.max_prefill_tokens = int(max_prefill_tokens)
        self.budget = Budget(self.max_kv_tokens, max_batch_size)
        self.vocab_size = self._vocab_size()
        self.eos_ids = self._eos_ids()
        self.weight_version = 0
        # Generators live on the model's device: torch.multinomial refuses a CPU generator for CUDA tensors.
        self._generator = torch.Generator(device=self.device).manual_seed(seed)
        self._cv = threading.Condition()
        self._waiting: list[_Request] = []
        self._active: list[_Seq] = []
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._pause_depth = 0
        self._is_paused = False
        self._admitted = 0
        self._kv = SlotKV(self.device)
        self._rows = RowTable(self.device)
        cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        self._cache = self._kv.cache(int(cfg.num_hidden_layers))
        self._comp_key: tuple[int, ...] = ()
        self._comp: dict[str, Any] = {}
        self.stats = {"steps": 0, "prefills": 0, "tokens": 0, "max_batch": 0, "prefill_forwards": 0,
                      "kv_bytes": 0, "peak_kv_bytes": 0, "kv_capacity_tokens": 0, "oom_failures": 0,
                      "request_failures": 0}

    # -- construction ----------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, path: str | Path, *, dtype: str = "auto", device: str = "cpu", **kw: Any) -> InferenceEngine:
        from verifiers.inference.attention import use_gqa_attention
        from verifiers.inference.loading import load_model_and_tokenizer

        model, tok = load_model_and_tokenizer(path, dtype=dtype, device=device)
        use_gqa_attention(model)  # the engine owns this model: no KV copies per step (same outputs)
        return cls(model, tok, **kw)

    def _vocab_size(self) -> int:
        """Token ids valid both as inputs (embedding rows) and as logit columns."""
        sizes = []
        emb = self.model.get_input_embeddings() if hasattr(self.model, "get_input_embeddings") else None
        if emb is not None and getattr(emb, "weight", None) is not None:
            sizes.append(int(emb.weight.shape[0]))
        head = self.model.get_output_embeddings() if hasattr(self.model, "get_output_embeddings") else None
        if head is not None and getattr(head, "weight", None) is not None:
            sizes.append(int(head.weight.shape[0]))
        cfg = self.model.config.get_text_config() if hasattr(self.model.config, "get_text_config") else self.model.config
        if not sizes and getattr(cfg, "vocab_size", None):
            sizes.append(int(cfg.vocab_size))
        return min(sizes) if sizes else len(self.tokenizer)

    def check_token_ids(self, ids: Sequence[Any], param: str) -> None:
        """Raise `InvalidRequestError` unless every id is an int in ``[0, vocab_size)``."""
        v = self.vocab_size
        for t in ids:
            if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < v:
                raise InvalidRequestError(
                    f"'{param}' holds token id {t!r}, outside this model's vocabulary [0, {v})", param=param
                )

    def _eos_ids(self) -> set[int]:
        ids: set[int] = set()
        gen = getattr(self.model, "generation_config", None)
        eos = getattr(gen, "eos_token_id", None) if gen is not None else None
        if eos is None:
            eos = getattr(self.model.config, "eos_token_id", None)
        if isinstance(eos, int):
            ids.add(eos)
        elif eos:
            ids.update(int(e) for e in eos)
        if self.tokenizer.eos_token_id is not None:
            ids.add(int(self.tokenizer.eos_token_id))
        return ids

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> InferenceEngine:
        if self._thread is None or not self._thread.is_alive():
            self._stopping = False
            self._thread = threading.Thread(target=self._run, name="vf-engine", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self._thread = None

    def __enter__(self) -> InferenceEngine:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- weights ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Hold the engine between decoding steps (e.g. while an optimizer updates shared weights)."""
        with self._cv:
            self._pause_depth += 1
            self._cv.notify_all()
            while self._thread is not None and self._thread.is_alive() and not self._is_paused:
                self._cv.wait(0.05)
        try:
            yield
        finally:
            with self._cv:
                self._pause_depth -= 1
                self._cv.notify_all()

    def bump_version(self) -> int:
        """Record that the (shared) weights changed; returns the new version."""
        self.weight_version += 1
        return self.weight_version

    def update_weights(self, state: Any, *, strict: bool = True) -> int:
        """Copy ``state`` (a state dict or a model) into the engine's model and bump the version.

        All or nothing: every tensor's name, shape and dtype kind is checked against the served
        model before the first copy, so a mismatched checkpoint raises `ConfigError` naming the
        mismatch and leaves the weights and ``weight_version`` as they were (``load_state_dict``
        alone copies the matching tensors before it complains). Floating-point tensors may differ
        in width (an fp32 trainer feeding a bf16 server); they are cast on copy. A no-op copy when
        ``state`` is the engine's own model (shared weights).
        """
        import torch

        with self.paused():
            if state is not self.model:
                sd = state.state_dict() if hasattr(state, "state_dict") else state
                pairs = self._match_state(sd, strict=strict)
                with torch.no_grad():
                    for dst, src in pairs:
                        dst.copy_(src)
            return self.bump_version()

    def _match_state(self, sd: Any, *, strict: bool) -> list[tuple[Any, Any]]:
        """``(served tensor, new tensor)`` pairs, or `ConfigError` listing every mismatch."""
        import torch

        own = self.model.state_dict()
        problems: list[str] = []
        if not hasattr(sd, "items"):
            raise WeightMismatchError(f"expected a state dict or a model, got {type(sd).__name__}")
        missing = [k for k in own if k not in sd]
        unexpected = [k for k in sd if k not in own]
        if strict and missing:
            problems.append(f"missing tensors: {', '.join(missing[:8])}{' ...' if len(missing) > 8 else ''}")
        if strict and unexpected:
            problems.append(f"unexpected tensors: {', '.join(unexpected[:8])}{' ...' if len(unexpected) > 8 else ''}")
        pairs = []
        for name, src in sd.items():
            dst = own.get(name)
            if dst is None:
                continue
            if not isinstance(src, torch.Tensor):
                problems.append(f"{name}: not a tensor ({type(src).__name__})")
            elif tuple(src.shape) != tuple(dst.shape):
                problems.append(f"{name}: shape {tuple(src.shape)}, served model has {tuple(dst.shape)}")
            elif src.dtype.is_floating_point != dst.dtype.is_floating_point or src.dtype.is_complex != dst.dtype.is_complex:
                problems.append(f"{name}: dtype {src.dtype}, served model has {dst.dtype}")
            else:
                pairs.append((dst, src))
        if problems:
            shown = "; ".join(problems[:6]) + (f"; and {len(problems) - 6} more" if len(problems) > 6 else "")
            raise WeightMismatchError(f"the new weights do not match the served model, nothing was changed: {shown}")
        return pairs

    def load_weights_from_disk(self, path: str | Path) -> int:
        """Reload weights saved with ``save_pretrained`` (the fallback when no in-process share exists).

        The checkpoint is loaded and checked in full before anything is copied (see `update_weights`).
        """
        from verifiers.inference.loading import load_model_and_tokenizer

        fresh, _ = load_model_and_tokenizer(path, device=str(self.device), with_tokenizer=False)
        return self.update_weights(fresh)

    # -- submission ------------------------------------------------------------------------
    def check_request(self, prompt_ids: Sequence[int], params: SamplingParams, n: int = 1) -> int:
        """Validate a request without running it; returns its effective ``max_tokens``.

        The messages use vLLM's wording ("maximum context length") so clients map them to
        their overlong-prompt error.
        """
        if not prompt_ids:
            raise InvalidRequestError("the prompt is empty: send at least one token", param="prompt")
        if n < 1:
            raise InvalidRequestError(f"n must be >= 1, got {n}", param="n")
        self.check_token_ids(prompt_ids, "prompt")
        self.check_token_ids(params.stop_token_ids, "stop_token_ids")
        room = self.max_model_len - len(prompt_ids)
        if room <= 0:
            raise OverlongPromptError(
                f"This model's maximum context length is {self.max_model_len} tokens. However, your request has "
                f"{len(prompt_ids)} input tokens. Please reduce the length of the input messages."
            )
        max_tokens = params.max_tokens if params.max_tokens is not None else room
        if max_tokens > room:
            raise OverlongPromptError(
                f"This model's maximum context length is {self.max_model_len} tokens. However, you requested "
                f"{len(prompt_ids) + max_tokens} tokens ({len(prompt_ids)} in the messages, {max_tokens} in the "
                "completion). Please reduce the length of the messages or completion."
            )
        worst = len(prompt_ids) + max_tokens
        if self.budget.never_fits(n, worst):
            raise OverlongPromptError(
                f"This request needs up to {n * worst} KV-cache tokens (n={n} x ({len(prompt_ids)} prompt + "
                f"{max_tokens} max_tokens)), more than the engine's max_kv_tokens={self.max_kv_tokens} even when "
                "idle. Lower max_tokens or n, or start the engine with a larger max_kv_tokens."
            )
        return max_tokens

    def _make_request(
        self, prompt_ids: Sequence[int], params: SamplingParams, n: int, sink: _Sink, forced: Sequence[int]
    ) -> _Request:
        prompt = list(prompt_ids)
        max_tokens = self.check_request(prompt, params, n)
        self.check_token_ids(forced, "tool_choice")
        return _Request(prompt, params, n, max_tokens, sink, list(forced))

    def _enqueue(self, req: _Request) -> None:
        if self._thread is None or not self._thread.is_alive():
            raise RuntimeError("the inference engine is not running: call start() or use it as a context manager")
        with self._cv:
            self._waiting.append(req)
            self._cv.notify_all()

    async def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams, n: int = 1, *, forced: Sequence[int] = ()
    ) -> RequestOutput:
        """Generate ``n`` independent continuations of ``prompt_ids``.

        ``forced`` tokens are emitted first (with their real logprobs), then sampling takes
        over; this is how a required or named tool choice is honoured.
        """
        req = self._make_request(prompt_ids, params, n, _Sink(asyncio.get_running_loop(), False), forced)
        self._enqueue(req)
        try:
            return await req.sink.future
        except asyncio.CancelledError:
            req.cancelled = True
            raise

    def stream(
        self, prompt_ids: Sequence[int], params: SamplingParams, n: int = 1, *, forced: Sequence[int] = ()
    ) -> AsyncIterator[StreamDelta | RequestOutput]:
        """Yield `StreamDelta`s as tokens arrive, then the final `RequestOutput`.

        Validation (context length, empty prompt) happens here, before the first item, so a
        server can still answer a bad request with an error status instead of a broken stream.
        Must be called from a running event loop.
        """
        req = self._make_request(prompt_ids, params, n, _Sink(asyncio.get_running_loop(), True), forced)
        self._enqueue(req)
        return self._iterate(req)

    async def _iterate(self, req: _Request) -> AsyncIterator[StreamDelta | RequestOutput]:
        queue = req.sink.queue
        if queue is None:
            raise RuntimeError("not a streaming request")
        try:
            while True:
                item = await queue.get()
                if item is None:
                    break
                if isinstance(item, BaseException):
                    raise item
                yield item
            yield await req.sink.future
        finally:
            if not req.sink.future.done():
                req.cancelled = True

    def generate_sync(
        self, prompt_ids: Sequence[int], params: SamplingParams, n: int = 1, *, forced: Sequence[int] = ()
    ) -> RequestOutput:
        req = self._make_request(prompt_ids, params, n, _Sink(None, False), forced)
        self._enqueue(req)
        return req.sink.future.result()

    # -- the loop --------------------------------------------------------------------------
    def _run(self) -> None:
        import torch

        with torch.inference_mode():
            while True:
                with self._cv:
                    while True:
                        if self._stopping:
                            self._fail_all(RuntimeError("the inference engine stopped"))
                            return
                        if self._pause_depth > 0:
                            self._is_paused = True
                            self._cv.notify_all()
                            self._cv.wait()
                            continue
                        self._is_paused = False
                        if self._waiting or self._active:
                            break
                        self._cv.wait()
                    new = self._admit()
                try:
                    self._step_or_shed(new)
                except Exception as exc:
                    self._fail_all(exc, also=new)

    def _admit(self) -> list[_Request]:
        """Waiting requests that fit the KV budget and the row cap, strictly first come first served.

        Only the head of the queue can be admitted, so a large request is never overtaken by a
        stream of small ones: it waits until enough rows finish. Alone in an empty engine a request
        always runs (one that could never fit was refused at submission).
        """
        rows, width = len(self._active), self._active_width()
        new: list[_Request] = []
        while self._waiting:
            req = self._waiting[0]
            if req.cancelled:
                self._waiting.pop(0)
                continue
            if req.isolated and new:
                break  # a suspect of a failed step joins a step on its own
            if not (self._active or new) or self.budget.fits(rows, width, req.n, req.worst):
                self._waiting.pop(0)
                self._admitted += 1
                req.order = self._admitted
                new.append(req)
                rows, width = rows + req.n, max(width, req.worst)
                if req.isolated:
                    break
            else:
                break
        return new

    def _active_width(self) -> int:
        """Worst-case dense width (padded prompt + max_tokens) of the running rows."""
        return max((s.worst for s in self._active), default=0)

    def _step_or_shed(self, new: list[_Request]) -> None:
        """Run one step; when it raises, fail only the request that caused it and carry on.

        Out of memory: the newest admitted request is the one the memory was not there for; it
        fails, its rows are freed and the step is retried. Any other error: if the step admitted
        new requests, they go back to the head of the queue marked ``isolated`` (each then joins
        a later step alone) and the running rows' step is retried without them; a new request
        that fails while alone beside rows that step fine without it is the culprit. A step of
        running rows alone that fails sheds its newest request, like an OOM. A failed step
        leaves no committed state behind (a retried decode rewrites the same cache column), so
        retrying is safe.
        """
        suspect: _Request | None = None
        suspect_exc: BaseException | None = None
        while True:
            try:
                self._step(new)
            except Exception as exc:
                if _is_oom(exc):
                    victim = new.pop() if new else self._newest_active()
                    if victim is None:
                        raise
                    self.stats["oom_failures"] += 1
                    self._evict(victim, _oom_error(exc))
                    _empty_device_cache(self.device)
                elif new:
                    if len(new) == 1 and new[0].isolated:
                        suspect, suspect_exc = new.pop(), exc  # guilty if the running rows step fine without it
                    else:
                        for r in new:
                            r.isolated = True
                        with self._cv:
                            self._waiting[0:0] = new
                        new = []
                elif (victim := self._newest_active()) is not None:
                    self._evict(victim, _step_error(exc))
                    if suspect is not None:  # the fault is in the running rows: the suspect gets another try
                        with self._cv:
                            self._waiting.insert(0, suspect)
                        suspect = None
                else:
                    raise
                if not new and not self._active:
                    break
                continue
            break
        if suspect is not None:
            self._reject(suspect, _step_error(suspect_exc or RuntimeError("failed a step on its own")))

    def _newest_active(self) -> _Request | None:
        return max((s.req for s in self._active), key=lambda r: r.order, default=None)

    def _reject(self, req: _Request, exc: BaseException) -> None:
        """Fail a request that holds no rows (it never joined the batch)."""
        self.stats["request_failures"] += 1
        req.cancelled = True
        req.sink.fail(exc)

    def _evict(self, req: _Request, exc: BaseException) -> None:
        self.stats["request_failures"] += 1
        req.cancelled = True
        req.sink.fail(exc)
        rows = [i for i, s in enumerate(self._active) if s.req is req]
        if rows:
            self._remove_rows(rows)

    def _fail_all(self, exc: BaseException, also: Sequence[_Request] = ()) -> None:
        reqs = {id(s.req): s.req for s in self._active}
        for r in [*also, *self._waiting]:
            reqs[id(r)] = r
        for r in reqs.values():
            r.sink.fail(exc)
        self._active = []
        self._waiting = []
        self._kv.release()
        self._rows.drop("seen")

    def _step(self, new: list[_Request]) -> None:
        import torch

        # Cancelled requests leave before we spend compute on them.
        if any(s.req.cancelled for s in self._active):
            self._remove_rows([i for i, s in enumerate(self._active) if s.req.cancelled])
        if not self._active and not new:  # every row was cancelled (clients went away): nothing to run
            return
        active = self._active
        n_dec = len(active)
        plan = self._plan_prefill(new, n_dec) if new else None
        n_new = len(plan.seqs) if plan is not None else 0
        dec_width = max((s.used for s in active), default=-1) + 1
        cols = max(dec_width, plan.width if plan is not None else 0)
        bound = max(self._active_width(), max((s.worst for s in plan.seqs), default=0) if plan else 0)
        self._kv.reserve(n_dec + n_new, cols, keep_rows=n_dec, keep_cols=max(dec_width - 1, 0),
                         max_tokens=self.budget.max_tokens, max_cols=bound)
        self._rows.ensure(n_dec + n_new)
        parts = []
        if n_dec:
            parts.append(self._decode_forward(n_dec, dec_width))
        if plan is not None:
            self.stats["prefills"] += 1
            parts.append(self._prefill(plan, n_dec))
        logits = parts[0] if len(parts) == 1 else torch.cat(parts, dim=0)
        seqs = active + (plan.seqs if plan is not None else [])
        tokens, host = self._choose(logits, seqs)
        self._commit(tokens, n_dec, len(seqs))
        if plan is not None:
            for req in new:
                req.version = self.weight_version
            self._active = seqs
        self.stats["steps"] += 1
        self.stats["max_batch"] = max(self.stats["max_batch"], len(seqs))
        self.stats["tokens"] += len(seqs)
        self._note_memory()
        finished = []
        broken: dict[int, tuple[_Request, BaseException]] = {}
        for i, seq in enumerate(seqs):
            try:
                self._advance(seq, *host[i])
            except Exception as exc:  # committed state: fail this request, not the step
                broken.setdefault(id(seq.req), (seq.req, exc))
                continue
            if seq.finish_reason is not None:
                finished.append(i)
        finished = [i for i in finished if id(seqs[i].req) not in broken]
        if finished:
            self._retire(finished)
        for req, exc in broken.values():
            self._evict(req, _step_error(exc))

    def _note_memory(self) -> None:
        nbytes = self._kv.nbytes()
        self.stats["kv_bytes"] = nbytes
        self.stats["peak_kv_bytes"] = max(self.stats["peak_kv_bytes"], self._kv.peak_bytes, nbytes)
        self.stats["kv_capacity_tokens"] = self._kv.capacity_tokens()

    # -- prefill -----------------------------------------------------------------------------
    def _plan_prefill(self, new: list[_Request], first_slot: int) -> _PrefillPlan:
        """Give every new row a slot: each distinct prompt's first row is prefilled, the rest are copies.

        Identical prompts (the G samples of a GRPO group sent as G requests, or ``n > 1``) share one
        prefill; their cache rows are copied from it afterwards.
        """
        from verifiers.inference.kv_budget import prefill_groups

        unique: dict[tuple[int, ...], int] = {}
        longest_new: list[int] = []
        for r in new:
            u = unique.setdefault(tuple(r.prompt_ids), len(unique))
            if u == len(longest_new):
                longest_new.append(r.max_tokens)
            longest_new[u] = max(longest_new[u], r.max_tokens)
        prompts = list(unique)
        bound = max(self._active_width(), max(r.worst for r in new))
        groups = prefill_groups([(len(p), longest_new[i]) for i, p in enumerate(prompts)], bound,
                                max(1, self.max_prefill_tokens))
        slot_of: dict[int, int] = {}
        group_slots: list[tuple[int, list[int], int]] = []  # (first slot, prompt ids, padded length)
        slot = first_slot
        for g in groups:
            group_slots.append((slot, g, max(len(prompts[i]) for i in g)))
            for i in g:
                slot_of[i] = slot
                slot += 1
        padded = {i: length for _, g, length in group_slots for i in g}
        seqs: list[_Seq | None] = [None] * len(unique)
        copies: list[tuple[int, int]] = []
        for req in new:
            req.seqs = []
            req.remaining = req.n
            u = unique[tuple(req.prompt_ids)]
            for j in range(req.n):
                p = req.params
                row = RowSampling(p.temperature, p.top_p, p.top_k, p.min_p, p.repetition_penalty, p.seed, j)
                seq = _Seq(req, j, row, list(req.forced), used=padded[u], worst=padded[u] + req.max_tokens)
                req.seqs.append(seq)
                if seqs[slot_of[u] - first_slot] is None:
                    seqs[slot_of[u] - first_slot] = seq
                else:
                    copies.append((slot_of[u], slot))
                    seqs.append(seq)
                    slot += 1
        return _PrefillPlan([s for s in seqs if s is not None], prompts, group_slots, copies,
                            max(padded.values()))

    def _prefill(self, plan: _PrefillPlan, first_slot: int) -> Any:
        """Prefill the distinct prompts group by group, in chunks of at most ``max_prefill_tokens`` tokens.

        Each group is left-padded to its longest prompt and written straight into its slots of the
        cache; a forward sees ``rows x chunk <= max_prefill_tokens`` new tokens (a single long prompt
        is cut along the sequence), so activation memory stays bounded whatever arrives.
        """
        import torch

        kv, dev = self._kv, self.device
        n_new = len(plan.seqs)
        kv.attn[first_slot : first_slot + n_new].zero_()
        group_logits = []
        for start, members, length in plan.groups:
            rows = [plan.prompts[i] for i in members]
            ids = torch.tensor([[0] * (length - len(p)) + list(p) for p in rows], dtype=torch.long, device=dev)
            mask = torch.tensor([[0] * (length - len(p)) + [1] * len(p) for p in rows], dtype=torch.long, device=dev)
            pos = (mask.cumsum(1) - 1).clamp(min=0)
            stop = start + len(rows)
            chunk = max(1, self.max_prefill_tokens // len(rows))
            for off in range(0, length, chunk):
                n = min(chunk, length - off)
                kv.attn[start:stop, off : off + n] = mask[:, off : off + n]
                kv.plan_prefill(start, stop, off, n)
                out = self.model(input_ids=ids[:, off : off + n], attention_mask=kv.attn[start:stop, : off + n],
                                 position_ids=pos[:, off : off + n], past_key_values=self._cache, use_cache=True,
                                 logits_to_keep=1)
                self.stats["prefill_forwards"] += 1
            group_logits.append(out.logits[:, -1, :])
        logits = group_logits[0] if len(group_logits) == 1 else torch.cat(group_logits, dim=0)
        if plan.copies:
            src = torch.tensor([s for s, _ in plan.copies], dtype=torch.long, device=dev)
            dst = torch.tensor([d for _, d in plan.copies], dtype=torch.long, device=dev)
            kv.copy_rows(src, dst, plan.width)
            logits = torch.cat([logits, logits.index_select(0, src - first_slot)], dim=0)
        self._join_rows(plan.seqs, first_slot, logits.shape[1])
        return logits

    def _join_rows(self, seqs: list[_Seq], first_slot: int, vocab: int) -> None:
        """Write the new rows' positions and sampling parameters into their slots (once per row)."""
        import torch

        from verifiers.inference.sampling import row_values, seed_key

        t = self._rows
        for name, dtype in _ROW_COLUMNS.items():
            t.add(name, getattr(torch, dtype))
        t.set("used", first_slot, [s.used for s in seqs])
        t.set("pos", first_slot, [len(s.req.prompt_ids) for s in seqs])
        t.set("gen", first_slot, [0] * len(seqs))
        vals = [row_values(s.row, vocab) for s in seqs]
        for name in ("temperature", "top_k", "top_p", "min_p", "penalty"):
            t.set(name, first_slot, [v[name] for v in vals])
        t.set("seed_key", first_slot, [seed_key(s.row) for s in seqs])
        penalised = [i for i, s in enumerate(seqs) if s.row.repetition_penalty != 1.0]
        if penalised or "seen" in t.t:
            seen = t.add("seen", torch.bool, vocab)
            seen[first_slot : first_slot + len(seqs)] = False
            rows = [first_slot + i for i in penalised for _ in seqs[i].req.prompt_ids]
            ids = [tok for i in penalised for tok in seqs[i].req.prompt_ids]
            if rows:
                seen[torch.tensor(rows, device=self.device), torch.tensor(ids, device=self.device)] = True

    # -- decoding ------------------------------------------------------------------------------
    def _decode_forward(self, rows: int, width: int) -> Any:
        """One token for each running row, its key/value written in place at the row's next column."""
        cols = self._rows.t["used"][:rows]
        attn = self._kv.attn
        attn[:rows].scatter_(1, cols.unsqueeze(1), 1)
        self._kv.plan_decode(rows, cols, width)
        out = self.model(input_ids=self._rows.t["next"][:rows].unsqueeze(1), attention_mask=attn[:rows, :width],
                         position_ids=self._rows.t["pos"][:rows].unsqueeze(1), past_key_values=self._cache,
                         use_cache=True)
        return out.logits[:, -1, :]

    def _commit(self, tokens: Any, n_dec: int, n: int) -> None:
        """Record the sampled tokens on the device (next inputs, positions, repetition-penalty mask)."""
        t = self._rows.t
        t["next"][:n] = tokens
        if n_dec:
            t["used"][:n_dec] += 1
            t["pos"][:n_dec] += 1
            for s in self._active[:n_dec]:
                s.used += 1
        t["gen"][:n] += 1
        if "seen" in t:
            t["seen"][:n].scatter_(1, tokens.unsqueeze(1), True)

    def _batch_params(self, seqs: list[_Seq], vocab: int) -> Any:
        """Slices of the per-row columns plus the batch's composition (rebuilt only when rows change)."""
        from verifiers.inference.sampling import BatchParams, composition

        n = len(seqs)
        key = tuple(s.uid for s in seqs)
        if key != self._comp_key:
            self._comp = composition([s.row for s in seqs], vocab, self.device)
            self._comp_key = key
        t = self._rows.t
        comp = dict(self._comp)
        seeded = comp["seeded_idx"]
        keys = t["seed_key"][:n].index_select(0, seeded) if seeded is not None else None
        return BatchParams(
            temperature=t["temperature"][:n], top_k=t["top_k"][:n], top_p=t["top_p"][:n], min_p=t["min_p"][:n],
            penalty=t["penalty"][:n], seen=t["seen"][:n] if "seen" in t else None, seed_keys=keys, **comp,
        )

    def _choose(self, logits: Any, seqs: list[_Seq]) -> tuple[Any, list[tuple[int, float | None, Any]]]:
        """Sample one token per row; returns the device tokens and, per row, (token, logprob, top logprobs).

        Everything the host needs comes back in one device-to-host copy.
        """
        import torch

        from verifiers.inference.sampling import process_logits, sample

        dev, n = self.device, len(seqs)
        logits = logits.float()
        # min_tokens: the end-of-sequence tokens are impossible until enough tokens exist.
        block = [i for i, s in enumerate(seqs) if len(s.out) < s.req.params.min_tokens]
        if block:
            stop_ids = sorted(self.eos_ids)
            pairs = [(i, t) for i in block for t in stop_ids + list(seqs[i].req.params.stop_token_ids)]
            logits[torch.tensor([i for i, _ in pairs], device=dev),
                   torch.tensor([t for _, t in pairs], device=dev)] = float("-inf")
        params = self._batch_params(seqs, logits.shape[1])
        processed = process_logits(logits, params)
        tokens = sample(processed, params, self._generator, self._rows.t["gen"][:n])
        forced = [(i, s.forced[len(s.out)]) for i, s in enumerate(seqs) if len(s.forced) > len(s.out)]
        if forced:
            tokens[torch.tensor([i for i, _ in forced], device=dev)] = torch.tensor(
                [t for _, t in forced], dtype=tokens.dtype, device=dev)
        parts = [tokens.to(torch.float64).unsqueeze(1)]
        k = 0
        if any(s.req.params.logprobs for s in seqs):
            source = logits if self.logprobs_mode == "raw" else processed
            lps = torch.log_softmax(source, dim=1)
            parts.append(lps.gather(1, tokens.unsqueeze(1)).to(torch.float64))
            k = max(s.req.params.top_logprobs for s in seqs)
            if k > 0:
                vals, idx = torch.topk(lps, k, dim=1)
                parts += [idx.to(torch.float64), vals.to(torch.float64)]
        packed = torch.cat(parts, dim=1).cpu().tolist()  # the step's one device-to-host copy
        host = []
        for row in packed:
            top = list(zip((int(x) for x in row[2 : 2 + k]), row[2 + k :], strict=True)) if k else None
            host.append((int(row[0]), row[1] if len(parts) > 1 else None, top))
        return tokens, host

    def _retire(self, rows: list[int]) -> None:
        """Finished rows leave; a request resolves when its last row finishes."""
        for i in rows:
            seq = self._active[i]
            req = seq.req
            req.remaining -= 1
            if req.remaining == 0 and not req.cancelled:
                req.sink.resolve(self._output(req))
        self._remove_rows(rows)

    def _remove_rows(self, rows: list[int]) -> None:
        """Drop rows, keeping the rest packed in slots ``[0, B)`` by moving the last rows into the holes.

        Only the moved rows are copied (never the whole cache); an empty batch frees the cache.
        """
        import torch

        gone = set(rows)
        n = len(self._active)
        keep = n - len(gone)
        holes = sorted(i for i in gone if i < keep)
        movers = [i for i in range(keep, n) if i not in gone]
        if movers:
            src = torch.tensor(movers, dtype=torch.long, device=self.device)
            dst = torch.tensor(holes, dtype=torch.long, device=self.device)
            self._kv.copy_rows(src, dst, max(self._active[i].used for i in movers))
            self._rows.copy_rows(src, dst)
            for h, m in zip(holes, movers, strict=True):
                self._active[h] = self._active[m]
        self._active = self._active[:keep]
        if not self._active:
            self._kv.release()
            self._rows.drop("seen")
            self._note_memory()

    def _advance(self, seq: _Seq, tok: int, lp: float | None, top: list[tuple[int, float]] | None) -> None:
        p = seq.req.params
        seq.out.append(tok)
        if p.logprobs and lp is not None:
            seq.logprobs.append(lp)
            if p.top_logprobs and top is not None:
                seq.top.append(top[: p.top_logprobs])
        forcing = len(seq.forced) >= len(seq.out)
        if not forcing and tok in self.eos_ids and not p.ignore_eos and len(seq.out) >= p.min_tokens:
            seq.finish_reason = "stop"
        elif not forcing and tok in p.stop_token_ids and len(seq.out) >= p.min_tokens:
            seq.finish_reason, seq.stop_reason = "stop", tok
        if p.stop or seq.req.sink.queue is not None:
            seq.text = self._decode(seq.out)
            if p.stop and seq.finish_reason is None and len(seq.out) >= p.min_tokens:
                self._check_stop_strings(seq)
        if seq.finish_reason is None and len(seq.out) >= seq.req.max_tokens:
            seq.finish_reason = "length"
        if seq.req.sink.queue is not None:
            self._push_delta(seq)

    def _check_stop_strings(self, seq: _Seq) -> None:
        p = seq.req.params
        # Only the tail can contain a newly completed stop string.
        tail_from = max(0, len(seq.text) - max(len(s) for s in p.stop) - 16)
        best: tuple[int, str] | None = None
        for s in p.stop:
            pos = seq.text.find(s, tail_from)
            if pos >= 0 and (best is None or pos < best[0]):
                best = (pos, s)
        if best is not None:
            pos, s = best
            seq.text = seq.text[: pos + len(s)] if p.include_stop_str_in_output else seq.text[:pos]
            seq.finish_reason, seq.stop_reason = "stop", s

    def _push_delta(self, seq: _Seq) -> None:
        text = seq.text
        if seq.finish_reason is None:
            text = text.rstrip("\ufffd")  # an incomplete multi-byte character waits for its next token
            if seq.req.params.stop:  # hold back a suffix that could still become a stop string
                hold = max(len(s) for s in seq.req.params.stop) - 1
                text = text[: max(seq.streamed_chars, len(text) - hold)]
        new_text = text[seq.streamed_chars :]
        new_tokens = seq.out[seq.streamed_tokens :]
        delta = StreamDelta(
            index=seq.index,
            text=new_text,
            token_ids=new_tokens,
            logprobs=seq.logprobs[seq.streamed_tokens :] if seq.req.params.logprobs else [],
            top_logprobs=seq.top[seq.streamed_tokens :] if seq.req.params.top_logprobs else [],
            finish_reason=seq.finish_reason,
            stop_reason=seq.stop_reason,
        )
        seq.streamed_chars = len(text)
        seq.streamed_tokens = len(seq.out)
        if new_text or seq.finish_reason is not None:
            seq.req.sink.push(delta)

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def _output(self, req: _Request) -> RequestOutput:
        outs = []
        for s in req.seqs:
            text = s.text if (s.req.params.stop or req.sink.queue is not None) else self._decode(s.out)
            outs.append(
                SequenceOutput(
                    index=s.index,
                    token_ids=list(s.out),
                    text=text,
                    finish_reason=s.finish_reason or "stop",
                    stop_reason=s.stop_reason,
                    logprobs=list(s.logprobs) if req.params.logprobs else None,
                    top_logprobs=list(s.top) if req.params.top_logprobs else None,
                )
            )
        return RequestOutput(prompt_token_ids=req.prompt_ids, outputs=outs, weight_version=req.version)


@dataclass(slots=True, eq=False)
class _PrefillPlan:
    """Where a step's new rows go: ``seqs`` in slot order from the first free slot."""

    seqs: list[_Seq]
    prompts: list[tuple[int, ...]]
    groups: list[tuple[int, list[int], int]]  # (first slot, prompt indices, padded length)
    copies: list[tuple[int, int]]  # (source slot, destination slot) for rows sharing a prompt
    width: int  # the longest padded prompt


# Per-row device columns of the running batch (name -> torch dtype name).
_ROW_COLUMNS = {
    "used": "int64", "pos": "int64", "gen": "int64", "next": "int64", "temperature": "float32", "top_k": "int64",
    "top_p": "float32", "min_p": "float32", "penalty": "float32", "seed_key": "int64",
}


def _is_oom(exc: BaseException) -> bool:
    """An allocator failure: ``torch.OutOfMemoryError`` or a RuntimeError saying "out of memory"."""
    import torch

    return isinstance(exc, torch.OutOfMemoryError) or (isinstance(exc, RuntimeError) and "out of memory" in str(exc))


def _oom_error(exc: BaseException) -> ServerError:
    return ServerError(
        f"the inference engine ran out of device memory while this request ran ({exc}); other requests "
        "continue. Lower max_kv_tokens (or max_prefill_tokens), or send fewer/shorter requests at once."
    )


def _step_error(exc: BaseException) -> ServerError:
    return ServerError(f"the inference engine failed on this request ({type(exc).__name__}: {exc}); "
                       "other requests continue")


def _empty_device_cache(device: Any) -> None:
    """Give freed blocks back after an OOM so the surviving rows can allocate again."""
    import torch

    if getattr(device, "type", None) == "cuda" and torch.cuda.is_available():
        with contextlib.suppress(Exception):
            torch.cuda.empty_cache()
