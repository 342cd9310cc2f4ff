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

This module holds the engine's own work: construction, lifecycle, submission, admission and
fault isolation, weights. One decoding step over the running rows is `step.DecodeBatch`.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

from verifiers.errors import ConfigError
from verifiers.inference.engine.checks import check_request, check_token_ids
from verifiers.inference.engine.devices import empty_device_cache, is_oom
from verifiers.inference.engine.kv_budget import DEFAULT_PREFILL_TOKENS, Budget, default_kv_tokens
from verifiers.inference.engine.model_facts import eos_ids, text_decoder, vocab_size
from verifiers.inference.engine.requests import (
    Request,
    RequestOutput,
    Sink,
    StreamDelta,
    oom_error,
    step_error,
)
from verifiers.inference.engine.sampling import SamplingParams
from verifiers.inference.engine.step import DecodeBatch
from verifiers.inference.engine.weights import match_state


class InferenceEngine:
    """Owns a causal LM and serves generation requests with continuous batching.

    Use as a context manager (or `start`/`stop`). ``max_batch_size`` bounds the number of
    sequences decoded together; more requests wait their turn.

    Memory: ``max_kv_tokens`` bounds the KV cache, counted densely as rows x the longest row's
    worst case (prompt + max_tokens); a request is admitted, first come first served, only when
    its rows fit next to the running ones (`verifiers.inference.engine.kv_budget`). ``None`` means
    ``max_batch_size * max_model_len``, capped to half the memory available at construction (GPU memory, or RAM on a CPU).
    ``max_prefill_tokens`` bounds the new tokens one prefill forward processes (long prompts are
    prefilled in chunks). The cache is preallocated and written in place (`verifiers.inference.engine.kv.SlotKV`).
    An out-of-memory error fails only the newest request; the others continue.
    ``fast_decode`` decodes Llama-family float32 models on a CPU without transformers' forward
    (`verifiers.inference.engine.fast_decode`, same outputs); other models always use their own forward.
    ``packed_weights``: that path multiplies by oneDNN-packed copies of the projection weights (one more
    copy in memory, up to 1 GiB of them): True always, False never, None where measured faster here
    (`verifiers.inference.engine.product_choice`: 2-3x on an AMD EPYC, no gain on an Intel Xeon). The copy
    is rebuilt after `paused` ends and after `bump_version`: edit shared weights under `paused`.
    On a CUDA GPU that path also runs float32 and bfloat16 weights, and ``cuda_graphs`` replays its
    decoding step from CUDA graphs (`verifiers.inference.engine.cuda_graphs`: one launch a step instead of
    hundreds; weight updates in place reach the graphs); `decode_path` says what runs and why.
    ``autocast="bfloat16"`` runs every forward under bf16 autocast (float32 weights, bf16 products),
    as a trainer with ``mixed_precision = "bf16"`` learns.

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
        fast_decode: bool = True,
        packed_weights: bool | None = None,
        cuda_graphs: bool = True,
        autocast: str | None = None,
    ) -> None:
        if logprobs_mode not in ("raw", "processed"):
            raise ConfigError(f"logprobs_mode must be 'raw' or 'processed', got {logprobs_mode!r}")
        if autocast not in (None, "bfloat16"):
            raise ConfigError(f"autocast must be None or 'bfloat16', got {autocast!r}")
        self.autocast = autocast
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
        self.vocab_size = vocab_size(model, tokenizer)
        self.eos_ids = eos_ids(model, tokenizer)
        self.weight_version = 0
        self._cv = threading.Condition()
        self._waiting: list[Request] = []
        self._soon: dict[asyncio.AbstractEventLoop, list[Request]] = {}  # `_enqueue_soon`, per submitting loop
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._pause_depth = 0
        self._is_paused = False
        self._admitted = 0
        self.stats = {"steps": 0, "prefills": 0, "tokens": 0, "max_batch": 0, "prefill_forwards": 0,
                      "kv_bytes": 0, "peak_kv_bytes": 0, "kv_capacity_tokens": 0, "oom_failures": 0,
                      "request_failures": 0}
        self._decoder = DecodeBatch(model, device=self.device, seed=seed, budget=self.budget,
                                    max_prefill_tokens=self.max_prefill_tokens, logprobs_mode=logprobs_mode,
                                    eos_ids=self.eos_ids, decode=text_decoder(tokenizer, self._decode), stats=self.stats,
                                    fast_decode=fast_decode, packed_weights=packed_weights,
                                    cuda_graphs=cuda_graphs)

    # -- construction ----------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, path: str | Path, *, dtype: str = "auto", device: str = "cpu",
                        chat_template: str | None = None, **kw: Any) -> InferenceEngine:
        """An engine on ``path`` (a directory, a .gguf file, a registry name or a hub id) with the chat
        template `load_named_model` picks (``chat_template``, else a registry model's tool template)."""
        from verifiers.inference.engine.attention import use_gqa_attention
        from verifiers.inference.engine.loading import load_named_model

        model, tok = load_named_model(path, dtype=dtype, device=device, chat_template=chat_template)
        use_gqa_attention(model)  # the engine owns this model: no KV copies per step (same outputs)
        return cls(model, tok, **kw)

    def check_token_ids(self, ids: Sequence[Any], param: str) -> None:
        """Raise `InvalidRequestError` unless every id is an int in ``[0, vocab_size)``."""
        check_token_ids(ids, param, self.vocab_size)

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    # -- lifecycle -------------------------------------------------------------------------
    @property
    def fast_decoding(self) -> bool:
        """Whether decoding steps run the engine's own step (`verifiers.inference.engine.fast_decode`)."""
        return self._decoder.fast is not None

    @property
    def decode_path(self) -> str:
        """How decoding steps run: the engine's own step, or transformers' forward and why (for logs)."""
        reason = self._decoder.slow_reason
        if reason is not None:
            return f"transformers' forward ({reason})"
        graphed = self._decoder.graphed
        graphs = self._decoder.graph_reason or (graphed.failed if graphed is not None else None)
        if graphs is None:
            return "the engine's own decoding step, replayed from CUDA graphs"
        if self.device.type != "cuda":  # graphs are a GPU matter: nothing to explain on a CPU
            return "the engine's own decoding step"
        return f"the engine's own decoding step (no CUDA graphs: {graphs})"

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
                if self._pause_depth == 0:  # whoever paused may have written the weights
                    self._decoder.weights_changed()
                self._cv.notify_all()

    def bump_version(self) -> int:
        """Record that the (shared) weights changed; returns the new version."""
        self._decoder.weights_changed()
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
                pairs = match_state(self.model.state_dict(), sd, strict=strict)
                with torch.no_grad():
                    for dst, src in pairs:
                        dst.copy_(src)
            return self.bump_version()

    def load_weights_from_disk(self, path: str | Path) -> int:
        """Reload weights saved with ``save_pretrained`` (the fallback when no in-process share exists).

        The checkpoint is loaded and checked in full before anything is copied (see `update_weights`).
        """
        from verifiers.inference.engine.loading import load_model_and_tokenizer

        fresh, _ = load_model_and_tokenizer(path, device=str(self.device), with_tokenizer=False)
        return self.update_weights(fresh)

    # -- submission ------------------------------------------------------------------------
    def check_request(self, prompt_ids: Sequence[int], params: SamplingParams, n: int = 1) -> int:
        """Validate a request without running it; returns its effective ``max_tokens`` (`check_request`)."""
        return check_request(prompt_ids, params, n, vocab=self.vocab_size, max_model_len=self.max_model_len,
                             budget=self.budget)

    def _make_request(
        self, prompt_ids: Sequence[int], params: SamplingParams, n: int, sink: Sink, forced: Sequence[int]
    ) -> Request:
        prompt = list(prompt_ids)
        max_tokens = self.check_request(prompt, params, n)
        self.check_token_ids(forced, "tool_choice")
        return Request(prompt, params, n, max_tokens, sink, list(forced))

    def _check_running(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            raise RuntimeError("the inference engine is not running: call start() or use it as a context manager")

    def _enqueue(self, req: Request) -> None:
        self._check_running()
        with self._cv:
            self._waiting.append(req)
            self._cv.notify_all()

    def _enqueue_soon(self, req: Request) -> None:
        """Queue ``req`` at the end of this event-loop iteration, with every request submitted in it.

        Why: a trainer submits a whole batch (64 rollouts) within one loop iteration. Woken by the
        first request, the engine would start a step with the few that had arrived and prefill the
        rest a step later, one more step for the whole batch; handed over together, they share one
        prefill. The delay is the rest of the current iteration.
        """
        self._check_running()
        loop = asyncio.get_running_loop()
        pending = self._soon.setdefault(loop, [])
        pending.append(req)
        if len(pending) == 1:
            loop.call_soon(self._hand_over, loop)

    def _hand_over(self, loop: asyncio.AbstractEventLoop) -> None:
        reqs = [r for r in self._soon.pop(loop, []) if not r.cancelled]
        if not reqs:
            return
        with self._cv:
            if self._thread is None or not self._thread.is_alive() or self._stopping:
                exc = RuntimeError("the inference engine stopped")
                for r in reqs:
                    r.sink.fail(exc)
                return
            self._waiting.extend(reqs)
            self._cv.notify_all()

    async def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams, n: int = 1, *, forced: Sequence[int] = ()
    ) -> RequestOutput:
        """Generate ``n`` independent continuations of ``prompt_ids``.

        ``forced`` tokens are emitted first (with their real logprobs), then sampling takes
        over; this is how a required or named tool choice is honoured.
        """
        req = self._make_request(prompt_ids, params, n, Sink(asyncio.get_running_loop(), False), forced)
        self._enqueue_soon(req)
        try:
            return await req.sink.future
        except asyncio.CancelledError:
            req.cancelled = True
            raise

    def stream(
        self, prompt_ids: Sequence[int], params: SamplingParams, n: int = 1, *, forced: Sequence[int] = ()
    ) -> AsyncIterator[list[StreamDelta] | RequestOutput]:
        """Yield lists of the `StreamDelta`s ready together as tokens arrive, then the final `RequestOutput`.

        A list holds every delta made since the reader last took one (one per row per engine step,
        more when the reader fell behind), in order; a server writes each list out at once.
        Validation (context length, empty prompt) happens here, before the first item, so a
        server can still answer a bad request with an error status instead of a broken stream.
        Must be called from a running event loop.
        """
        req = self._make_request(prompt_ids, params, n, Sink(asyncio.get_running_loop(), True), forced)
        self._enqueue_soon(req)
        return self._iterate(req)

    async def _iterate(self, req: Request) -> AsyncIterator[list[StreamDelta] | RequestOutput]:
        sink = req.sink
        if not sink.streaming:
            raise RuntimeError("not a streaming request")
        try:
            ended = False
            while not ended:
                deltas: list[StreamDelta] = []
                for item in await sink.take():
                    if item is None:
                        ended = True
                        break
                    if isinstance(item, BaseException):
                        if deltas:
                            yield deltas
                        raise item
                    deltas.append(item)
                if deltas:
                    yield deltas
            yield await sink.future
        finally:
            if not sink.future.done():
                req.cancelled = True

    def generate_sync(
        self, prompt_ids: Sequence[int], params: SamplingParams, n: int = 1, *, forced: Sequence[int] = ()
    ) -> RequestOutput:
        req = self._make_request(prompt_ids, params, n, Sink(None, False), forced)
        self._enqueue(req)
        return req.sink.future.result()

    # -- the loop --------------------------------------------------------------------------
    def _run(self) -> None:
        import torch

        # Autocast is per thread: a trainer learning under bf16 autocast has its engine sample under it
        # too, so the sampled tokens' log-probabilities are those of the precision the learner trains in.
        # No cast cache: inside a captured CUDA graph it would hold casts of one replay's weights.
        cast = torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.autocast is not None,
                              cache_enabled=False)
        with torch.inference_mode(), cast:
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
                        if self._waiting or self._decoder.active:
                            break
                        self._cv.wait()
                    new = self._admit()
                try:
                    self._step_or_shed(new)
                except Exception as exc:
                    self._fail_all(exc, also=new)

    def _admit(self) -> list[Request]:
        """Waiting requests that fit the KV budget and the row cap, strictly first come first served.

        Only the head of the queue can be admitted, so a large request is never overtaken by a
        stream of small ones: it waits until enough rows finish. Alone in an empty engine a request
        always runs (one that could never fit was refused at submission).
        """
        rows, width = len(self._decoder.active), self._decoder.active_width()
        new: list[Request] = []
        while self._waiting:
            req = self._waiting[0]
            if req.cancelled:
                self._waiting.pop(0)
                continue
            if req.isolated and new:
                break  # a suspect of a failed step joins a step on its own
            if not (self._decoder.active or new) or self.budget.fits(rows, width, req.n, req.worst):
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

    def _step_or_shed(self, new: list[Request]) -> None:
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
        suspect: Request | None = None
        suspect_exc: BaseException | None = None
        while True:
            try:
                self._step(new)
            except Exception as exc:
                if is_oom(exc):
                    victim = new.pop() if new else self._decoder.newest_request()
                    if victim is None:
                        raise
                    self.stats["oom_failures"] += 1
                    self._decoder.evict(victim, oom_error(exc))
                    empty_device_cache(self.device)
                elif new:
                    if len(new) == 1 and new[0].isolated:
                        suspect, suspect_exc = new.pop(), exc  # guilty if the running rows step fine without it
                    else:
                        for r in new:
                            r.isolated = True
                        with self._cv:
                            self._waiting[0:0] = new
                        new = []
                elif (victim := self._decoder.newest_request()) is not None:
                    self._decoder.evict(victim, step_error(exc))
                    if suspect is not None:  # the fault is in the running rows: the suspect gets another try
                        with self._cv:
                            self._waiting.insert(0, suspect)
                        suspect = None
                else:
                    raise
                if not new and not self._decoder.active:
                    break
                continue
            break
        if suspect is not None:
            self._reject(suspect, step_error(suspect_exc or RuntimeError("failed a step on its own")))

    def _reject(self, req: Request, exc: BaseException) -> None:
        """Fail a request that holds no rows (it never joined the batch)."""
        self.stats["request_failures"] += 1
        req.cancelled = True
        req.sink.fail(exc)

    def _fail_all(self, exc: BaseException, also: Sequence[Request] = ()) -> None:
        reqs = {id(s.req): s.req for s in self._decoder.active}
        for r in [*also, *self._waiting]:
            reqs[id(r)] = r
        for r in reqs.values():
            r.sink.fail(exc)
        self._decoder.clear()
        self._waiting = []

    def _step(self, new: list[Request]) -> None:
        """One decoding step (a method of its own so tests can spy on it)."""
        self._decoder.step(new, lambda: self.weight_version)

    # -- sampling state ----------------------------------------------------------------------
    def rng_state(self) -> Any:
        """The sampling generator's state (a checkpoint saves it so a resumed run samples alike)."""
        return self._decoder.generator.get_state()

    def set_rng_state(self, state: Any) -> None:
        """Restore a state from `rng_state`."""
        self._decoder.generator.set_state(state)
