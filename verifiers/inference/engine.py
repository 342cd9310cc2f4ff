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
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verifiers.errors import ConfigError, OverlongPromptError
from verifiers.inference import kv
from verifiers.inference.sampling import RowSampling, SamplingParams, process_logits, sample


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


@dataclass(slots=True, eq=False)
class _Seq:
    req: _Request
    index: int
    row: RowSampling
    forced: list[int]
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
    sequences decoded together; more requests wait their turn. ``logprobs_mode="raw"``
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
        self._batch: _Batch | None = None
        self.stats = {"steps": 0, "prefills": 0, "tokens": 0, "max_batch": 0}

    # -- construction ----------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, path: str | Path, *, dtype: str = "auto", device: str = "cpu", **kw: Any) -> InferenceEngine:
        from verifiers.inference.attention import use_gqa_attention
        from verifiers.inference.loading import load_model_and_tokenizer

        model, tok = load_model_and_tokenizer(path, dtype=dtype, device=device)
        use_gqa_attention(model)  # the engine owns this model: no KV copies per step (same outputs)
        return cls(model, tok, **kw)

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

        A no-op copy when ``state`` is the engine's own model (shared weights).
        """
        import torch

        with self.paused():
            if state is not self.model:
                sd = state.state_dict() if hasattr(state, "state_dict") else state
                with torch.no_grad():
                    self.model.load_state_dict(sd, strict=strict)
            return self.bump_version()

    def load_weights_from_disk(self, path: str | Path) -> int:
        """Reload weights saved with ``save_pretrained`` (the fallback when no in-process share exists)."""
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
            raise ConfigError("the prompt is empty: send at least one token")
        if n < 1:
            raise ConfigError(f"n must be >= 1, got {n}")
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
        return max_tokens

    def _make_request(
        self, prompt_ids: Sequence[int], params: SamplingParams, n: int, sink: _Sink, forced: Sequence[int]
    ) -> _Request:
        prompt = [int(t) for t in prompt_ids]
        max_tokens = self.check_request(prompt, params, n)
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
                    room = self.max_batch_size - len(self._active)
                    new: list[_Request] = []
                    while self._waiting and room >= self._waiting[0].n:
                        req = self._waiting.pop(0)
                        if req.cancelled:
                            continue
                        room -= req.n
                        new.append(req)
                    if not new and not self._active and self._waiting:
                        new.append(self._waiting.pop(0))  # larger than the batch cap: run it alone
                try:
                    self._step(new)
                except Exception as exc:
                    self._fail_all(exc, also=new)

    def _fail_all(self, exc: BaseException, also: Sequence[_Request] = ()) -> None:
        reqs = {id(s.req): s.req for s in self._active}
        for r in [*also, *self._waiting]:
            reqs[id(r)] = r
        for r in reqs.values():
            r.sink.fail(exc)
        self._active = []
        self._waiting = []
        self._batch = None

    def _step(self, new: list[_Request]) -> None:
        import torch

        # Cancelled requests leave before we spend compute on them.
        if any(s.req.cancelled for s in self._active):
            self._drop([i for i, s in enumerate(self._active) if s.req.cancelled])
        logits_parts = []
        if self._active:
            logits_parts.append(self._batch.decode(self.model))  # type: ignore[union-attr]
        new_seqs: list[_Seq] = []
        if new:
            self.stats["prefills"] += 1
            for req in new:
                req.version = self.weight_version
                req.remaining = req.n
                for j in range(req.n):
                    p = req.params
                    row = RowSampling(p.temperature, p.top_p, p.top_k, p.min_p, p.repetition_penalty, p.seed, j)
                    if p.repetition_penalty != 1.0:
                        row.seen = set(req.prompt_ids)
                    seq = _Seq(req, j, row, list(req.forced))
                    req.seqs.append(seq)
                    new_seqs.append(seq)
            new_batch, new_logits = _Batch.prefill(self.model, new, self.device)
            logits_parts.append(new_logits)
            if self._batch is None:
                self._batch = new_batch
            else:
                self._batch.merge(new_batch)
            self._active.extend(new_seqs)
        self.stats["steps"] += 1
        self.stats["max_batch"] = max(self.stats["max_batch"], len(self._active))
        logits = logits_parts[0] if len(logits_parts) == 1 else torch.cat(logits_parts, dim=0)
        tokens, logprobs, tops = self._choose(logits)
        assert self._batch is not None
        self._batch.set_next(tokens)
        finished = []
        tok_list = tokens.tolist()
        for i, seq in enumerate(self._active):
            self._advance(seq, tok_list[i], logprobs[i] if logprobs is not None else None, tops[i] if tops else None)
            if seq.finish_reason is not None:
                finished.append(i)
        self.stats["tokens"] += len(tok_list)
        if finished:
            self._drop(finished)

    def _drop(self, rows: list[int]) -> None:
        import torch

        gone = set(rows)
        keep = [i for i in range(len(self._active)) if i not in gone]
        for i in rows:
            seq = self._active[i]
            req = seq.req
            if seq.finish_reason is None:  # cancelled
                continue
            req.remaining -= 1
            if req.remaining == 0 and not req.cancelled:
                req.sink.resolve(self._output(req))
        self._active = [self._active[i] for i in keep]
        if not keep:
            self._batch = None
        else:
            assert self._batch is not None
            self._batch.select(torch.tensor(keep, dtype=torch.long, device=self.device))

    def _choose(self, logits: Any) -> tuple[Any, list[float] | None, list[list[tuple[int, float]]] | None]:
        import torch

        seqs = self._active
        rows = [s.row for s in seqs]
        logits = logits.float()
        # min_tokens: the end-of-sequence tokens are impossible until enough tokens exist.
        block = [i for i, s in enumerate(seqs) if len(s.out) < s.req.params.min_tokens]
        if block:
            stop_ids = sorted(self.eos_ids)
            for i in block:
                ids = stop_ids + list(seqs[i].req.params.stop_token_ids)
                logits[i, ids] = float("-inf")
        processed = process_logits(logits, rows)
        tokens = sample(processed, rows, self._generator, [len(s.out) for s in seqs])
        forced_rows = [i for i, s in enumerate(seqs) if len(s.forced) > len(s.out)]
        for i in forced_rows:
            tokens[i] = seqs[i].forced[len(seqs[i].out)]
        want_lp = any(s.req.params.logprobs for s in seqs)
        if not want_lp:
            return tokens, None, None
        source = logits if self.logprobs_mode == "raw" else processed
        lps = torch.log_softmax(source, dim=1)
        chosen = lps.gather(1, tokens.unsqueeze(1)).squeeze(1).tolist()
        k = max(s.req.params.top_logprobs for s in seqs)
        tops: list[list[tuple[int, float]]] | None = None
        if k > 0:
            vals, idx = torch.topk(lps, k, dim=1)
            tops = [list(zip(idx[i].tolist(), vals[i].tolist(), strict=True)) for i in range(len(seqs))]
        return tokens, chosen, tops

    def _advance(self, seq: _Seq, tok: int, lp: float | None, top: list[tuple[int, float]] | None) -> None:
        p = seq.req.params
        seq.out.append(tok)
        if seq.row.repetition_penalty != 1.0:
            seq.row.seen.add(tok)
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


class _Batch:
    """Tensors of the running batch: KV cache, attention mask, next input token and position per row."""

    def __init__(self, cache: Any, attn: Any, positions: Any) -> None:
        self.cache = cache
        self.attn = attn  # [B, T] long, 0 on left padding
        self.positions = positions  # [B] position id of the next input token
        self.next_tokens: Any = None  # [B]

    @classmethod
    def prefill(cls, model: Any, reqs: list[_Request], device: Any) -> tuple[_Batch, Any]:
        """Run the distinct prompts of ``reqs`` once (left-padded) and expand rows to ``n`` each.

        Identical prompts (the G samples of a GRPO group sent as G requests) share one prefill
        row; their cache rows are copies of it.
        """
        import torch

        unique: dict[tuple[int, ...], int] = {}
        for r in reqs:
            unique.setdefault(tuple(r.prompt_ids), len(unique))
        prompts = list(unique)
        longest = max(len(p) for p in prompts)
        ids = torch.zeros((len(prompts), longest), dtype=torch.long)
        attn = torch.zeros((len(prompts), longest), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, longest - len(p) :] = torch.tensor(p, dtype=torch.long)
            attn[i, longest - len(p) :] = 1
        ids, attn = ids.to(device), attn.to(device)
        pos = (attn.cumsum(1) - 1).clamp(min=0)
        out = model(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=True, logits_to_keep=1)
        logits = out.logits[:, -1, :]
        cache = out.past_key_values
        lengths = attn.sum(1)
        rows = [unique[tuple(r.prompt_ids)] for r in reqs for _ in range(r.n)]
        if rows != list(range(len(prompts))):
            expand = torch.tensor(rows, device=device)
            kv.select_rows(cache, expand)
            logits = logits.index_select(0, expand)
            attn = attn.index_select(0, expand)
            lengths = lengths.index_select(0, expand)
        return cls(cache, attn, lengths.clone()), logits

    def merge(self, other: _Batch) -> None:
        import torch

        a, b = self.attn.shape[1], other.attn.shape[1]
        if a < b:
            kv.left_pad(self.cache, b - a)
            self.attn = torch.cat([self.attn.new_zeros(self.attn.shape[0], b - a), self.attn], dim=1)
        elif b < a:
            kv.left_pad(other.cache, a - b)
            other.attn = torch.cat([other.attn.new_zeros(other.attn.shape[0], a - b), other.attn], dim=1)
        kv.concat_rows(self.cache, other.cache)
        self.attn = torch.cat([self.attn, other.attn], dim=0)
        self.positions = torch.cat([self.positions, other.positions], dim=0)
        if self.next_tokens is not None and other.next_tokens is not None:
            self.next_tokens = torch.cat([self.next_tokens, other.next_tokens], dim=0)

    def set_next(self, tokens: Any) -> None:
        self.next_tokens = tokens

    def decode(self, model: Any) -> Any:
        import torch

        self.attn = torch.cat([self.attn, self.attn.new_ones(self.attn.shape[0], 1)], dim=1)
        out = model(
            input_ids=self.next_tokens.unsqueeze(1),
            attention_mask=self.attn,
            position_ids=self.positions.unsqueeze(1),
            past_key_values=self.cache,
            use_cache=True,
        )
        self.cache = out.past_key_values
        self.positions = self.positions + 1
        return out.logits[:, -1, :]

    def select(self, idx: Any) -> None:
        kv.select_rows(self.cache, idx)
        self.attn = self.attn.index_select(0, idx)
        self.positions = self.positions.index_select(0, idx)
        if self.next_tokens is not None:
            self.next_tokens = self.next_tokens.index_select(0, idx)
        # Columns that are padding in every surviving row are dead weight for attention.
        first_real = int((self.attn.cumsum(1) == 0).sum(1).min())
        if first_real > 0:
            kv.trim_left(self.cache, first_real)
            self.attn = self.attn[:, first_real:]
