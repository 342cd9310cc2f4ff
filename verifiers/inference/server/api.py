"""Request handling of the embedded OpenAI-compatible API, apart from HTTP routing.

`EmbeddedAPI` turns a parsed JSON body into an engine call and the engine's result into vLLM's
response shape (``prompt_token_ids``, per-choice ``token_ids``, ``weight_version``), streaming or
not; `verifiers.inference.server.app.create_app` routes HTTP requests to it, and the in-process
client (`verifiers.inference.server.runner`) reuses it without HTTP.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from verifiers.errors import ConfigError, OverlongPromptError
from verifiers.inference.engine import (
    InferenceEngine,
    RequestOutput,
    SequenceOutput,
    StreamDelta,
)
from verifiers.inference.server.protocol import (
    ChatRequest,
    CompletionRequest,
    DetokenizeRequest,
    OpenAIError,
    ReloadRequest,
    TokenizeRequest,
    validation_error,
)
from verifiers.inference.server.render_cache import RenderCache
from verifiers.inference.server.sse import DONE, ChunkWriter, DeltaBatches, merge_deltas
from verifiers.inference.server.tool_parser import OPEN, forced_text, parse_tool_calls, tag_prefix_len

INLINE_PARSE_CHARS = 16_000
"""Bodies up to about this size (`body_chars`) are parsed on the event loop, larger ones in a thread."""


def body_chars(body: Any) -> int:
    """A cheap estimate of the text a chat or completions body makes the parser render and tokenize.

    Why: parsing a typical request (a few messages) takes about 10 µs, less than the hop to a worker
    thread and back, and a batch of requests parsed in threads reaches the engine one by one; a
    huge body (a long document, a big tool list) can take seconds and must stay off the event loop.
    Message parts that are not text and tool schemas count as 1,000 characters each.
    """
    if not isinstance(body, dict):
        return INLINE_PARSE_CHARS + 1
    total = 1_000 * len(body.get("tools") or ())
    for m in body.get("messages") or ():
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, str):
            total += len(content)
        elif isinstance(content, list):
            total += sum(len(p.get("text") or "") if isinstance(p, dict) and p.get("type") == "text" else 1_000
                         for p in content)
        total += 200 * len(m.get("tool_calls") or ()) if isinstance(m, dict) else 1_000
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        total += len(prompt)
    elif isinstance(prompt, list):
        total += sum(len(p) if isinstance(p, (str, list)) else 1 for p in prompt)
    return total


async def parse_body(parse: Any, body: Any) -> Any:
    """``parse(body)``, on the event loop for a small body and in a worker thread for a large one."""
    if body_chars(body) <= INLINE_PARSE_CHARS:
        return parse(body)
    return await asyncio.to_thread(parse, body)


def render_chat(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    *,
    tools: list[dict[str, Any]] | None = None,
    add_generation_prompt: bool = True,
    **template_kwargs: Any,
) -> list[int]:
    """Chat template → token ids, the way vLLM does it: render text, then tokenize it."""
    from verifiers.data.templating import apply_chat_template

    return apply_chat_template(
        tokenizer, messages, tools=tools, add_generation_prompt=add_generation_prompt, **template_kwargs
    )


log = logging.getLogger(__name__)
_PROBE_TOOL = {"type": "function", "function": {"name": "vf_probe_tool", "description": "probe",
                                                "parameters": {"type": "object", "properties": {}}}}


def template_drops_tools(tokenizer: Any) -> bool:
    """Whether the chat template renders a conversation the same with and without ``tools``: then
    a request's tool schemas never reach the model (SmolLM2's template is one such)."""
    from verifiers.data.templating import ChatTemplateError, apply_chat_template

    probe = [{"role": "user", "content": "hi"}]
    try:
        with_tools = apply_chat_template(tokenizer, probe, tools=[_PROBE_TOOL], tokenize=False)
        without = apply_chat_template(tokenizer, probe, tokenize=False)
    except ChatTemplateError:
        return False  # a template that refuses tools says so itself, per request
    return with_tools == without


class _TokenText:
    """Cached id → text for logprob entries (decoding one id at a time is the hot path).

    Special tokens keep their text (e.g. ``<|im_end|>``) so an entry always names its token;
    the choice's ``text`` leaves them out.
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tok = tokenizer
        self.cache: dict[int, str] = {}

    def __call__(self, tid: int) -> str:
        s = self.cache.get(tid)
        if s is None:
            s = self.tok.decode([tid], skip_special_tokens=False)
            self.cache[tid] = s
        return s


class _ChatStreamState:
    """Per choice of one chat stream: the text so far, how much of it was sent, whether a tool call began."""

    __slots__ = ("in_tool", "sent", "text")

    def __init__(self, n: int) -> None:
        self.text = [""] * n
        self.sent = [0] * n
        self.in_tool = [False] * n


class EmbeddedAPI:
    """Request handling, separate from FastAPI routing so it can be tested and reused."""

    def __init__(
        self, engine: InferenceEngine, served_model_names: Sequence[str], *, reload_dir: str | Path | None = None
    ) -> None:
        if not served_model_names:
            raise ConfigError("give the server at least one model name to serve")
        self.engine = engine
        self.names = list(served_model_names)
        self.token_text = _TokenText(engine.tokenizer)
        self._tools_checked = False
        self.renders = RenderCache(engine.tokenizer)
        self.created = int(time.time())
        self.reload_dir = Path(reload_dir).resolve() if reload_dir is not None else None
        self._max_token_chars: int | None = None

    # -- limits ----------------------------------------------------------------------------
    @property
    def max_prompt_chars(self) -> int:
        """Characters that cannot fit in ``max_model_len`` tokens, whatever the tokenizer does.

        No token covers more characters than its vocabulary entry's length, so a text longer
        than ``max_model_len`` x the longest entry is overlong without tokenizing it.
        """
        if self._max_token_chars is None:
            try:
                vocab = self.engine.tokenizer.get_vocab()
                self._max_token_chars = max((len(t) for t in vocab), default=1) or 1
            except Exception:  # a tokenizer without a vocabulary listing: a generous bound
                self._max_token_chars = 64
        return self.engine.max_model_len * self._max_token_chars + 1024  # + template text

    def check_chars(self, n_chars: int, param: str) -> None:
        if n_chars > self.max_prompt_chars:
            raise OverlongPromptError(
                f"This model's maximum context length is {self.engine.max_model_len} tokens. However, your "
                f"request has {n_chars} characters in '{param}', more than that many tokens can hold. Please "
                "reduce the length of the input messages."
            )

    def check_constraints(self, req: Any) -> None:
        """Range-check token-id constraints, then refuse them: the embedded sampler does not apply them."""
        for name, ids in req.unsupported_constraints():
            self.engine.check_token_ids(ids, name)
            raise OpenAIError(400, f"'{name}' is not supported by the embedded server", param=name)

    # -- helpers ---------------------------------------------------------------------------
    def check_model(self, model: str | None) -> str:
        if model is None or model == "":
            return self.names[0]
        if model not in self.names:
            raise OpenAIError(404, f"The model `{model}` does not exist.", param="model")
        return model

    @staticmethod
    def parse(model_cls: type[BaseModel], body: Any) -> Any:
        if not isinstance(body, dict):
            raise OpenAIError(400, "the request body must be a JSON object")
        try:
            return model_cls.model_validate(body)
        except ValidationError as exc:
            raise validation_error(exc) from None

    def _encode(self, text: str) -> list[int]:
        return list(self.engine.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _chat_logprobs(self, ids: list[int], lps: list[float], tops: list[list[tuple[int, float]]] | None) -> dict:
        content = []
        for k, (tid, lp) in enumerate(zip(ids, lps, strict=False)):
            tok = self.token_text(tid)
            entry: dict[str, Any] = {"token": tok, "logprob": lp, "bytes": list(tok.encode()), "top_logprobs": []}
            if tops:
                entry["top_logprobs"] = [
                    {"token": self.token_text(t), "logprob": v, "bytes": list(self.token_text(t).encode())}
                    for t, v in tops[k]
                ]
            content.append(entry)
        return {"content": content}

    def _completion_logprobs(
        self, ids: list[int], lps: list[float], tops: list[list[tuple[int, float]]] | None, offset: int
    ) -> dict[str, Any]:
        tokens = [self.token_text(t) for t in ids]
        offsets, pos = [], offset
        for t in tokens:
            offsets.append(pos)
            pos += len(t)
        return {
            "tokens": tokens,
            "token_logprobs": list(lps),
            "top_logprobs": [{self.token_text(t): v for t, v in row} for row in tops] if tops else None,
            "text_offset": offsets,
        }

    @staticmethod
    def _usage(prompt_tokens: int, outs: Sequence[RequestOutput]) -> dict[str, int]:
        completion = sum(len(o.token_ids) for r in outs for o in r.outputs)
        return {"prompt_tokens": prompt_tokens, "completion_tokens": completion, "total_tokens": prompt_tokens + completion}

    # -- chat ------------------------------------------------------------------------------
    def _chat_inputs(self, req: ChatRequest) -> tuple[list[int], Any, list[int], bool]:
        self.check_model(req.model)
        named = req.named_tool()
        use_tools = bool(req.tools) and req.tool_choice != "none"
        tools = [t.model_dump(exclude_none=True) for t in req.tools or []] if use_tools else None
        if tools and not self._tools_checked:
            self._warn_if_tools_dropped()
        if req.tool_choice in ("required",) and not req.tools:
            raise OpenAIError(400, "tool_choice 'required' needs a non-empty 'tools' list", param="tool_choice")
        self.check_constraints(req)
        self.check_chars(_text_chars(req.messages) + _text_chars(tools), "messages")
        try:
            kwargs = req.chat_template_kwargs or {}
            prompt_ids = self.renders.ids(req.messages, tools, req.add_generation_prompt, kwargs, lambda: render_chat(
                self.engine.tokenizer, req.messages, tools=tools, add_generation_prompt=req.add_generation_prompt,
                **kwargs))
        except Exception as exc:
            raise OpenAIError(400, f"the chat template could not render these messages: {exc}", param="messages") from None
        if req.top_logprobs and not req.logprobs:
            raise OpenAIError(400, "top_logprobs requires logprobs=true", param="top_logprobs")
        max_tokens = req.max_completion_tokens or req.max_tokens
        params = req.sampling(max_tokens=max_tokens, logprobs=req.logprobs, top_logprobs=req.top_logprobs or 0)
        forced: list[int] = []
        if named is not None or req.tool_choice == "required":
            forced = self._encode(forced_text(named))
        return prompt_ids, params, forced, use_tools

    def _chat_choice(self, req: ChatRequest, o: SequenceOutput, use_tools: bool) -> dict[str, Any]:
        content: str | None = o.text
        tool_calls: list[dict[str, Any]] = []
        finish = o.finish_reason
        if use_tools and o.finish_reason == "stop":
            content, tool_calls = parse_tool_calls(o.text)
            if tool_calls:
                finish = "tool_calls"
        message: dict[str, Any] = {"role": "assistant", "content": content, "tool_calls": tool_calls}
        choice: dict[str, Any] = {
            "index": o.index,
            "message": message,
            "logprobs": self._chat_logprobs(o.token_ids, o.logprobs or [], o.top_logprobs) if req.logprobs else None,
            "finish_reason": finish,
            "stop_reason": o.stop_reason,
        }
        if req.return_token_ids:
            choice["token_ids"] = o.token_ids
        return choice

    def _warn_if_tools_dropped(self) -> None:
        """Once per server: a request sent tools the chat template does not render (the model
        answers without ever seeing them, which looks like a model that will not call tools)."""
        self._tools_checked = True
        if template_drops_tools(self.engine.tokenizer):
            log.warning("the chat template of %s does not render `tools`: requests' tool schemas never reach "
                        "the model. Serve it with --chat-template chatml-tools (Hermes-style tools in ChatML) or "
                        "another template that renders tools, or describe the tools in the messages (tool calls "
                        "are still parsed from <tool_call> blocks)", self.names[0])

    def _parse_chat(self, body: Any) -> tuple[ChatRequest, list[int], Any, list[int], bool]:
        req: ChatRequest = self.parse(ChatRequest, body)
        return (req, *self._chat_inputs(req))  # validates the model name

    async def chat(self, body: Any) -> dict[str, Any] | AsyncIterator[str]:
        req, prompt_ids, params, forced, use_tools = await parse_body(self._parse_chat, body)
        model = req.model or self.names[0]
        if req.stream:
            events = self.engine.stream(prompt_ids, params, req.n, forced=forced)
            return self._chat_stream(req, model, prompt_ids, events, use_tools)
        out = await self.engine.generate(prompt_ids, params, req.n, forced=forced)
        resp: dict[str, Any] = {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [self._chat_choice(req, o, use_tools) for o in out.outputs],
            "usage": self._usage(len(prompt_ids), [out]),
            "weight_version": out.weight_version,
        }
        if req.return_token_ids:
            resp["prompt_token_ids"] = prompt_ids
        return resp

    async def _chat_stream(
        self, req: ChatRequest, model: str, prompt_ids: list[int], events: AsyncIterator[Any], use_tools: bool
    ) -> AsyncIterator[str]:
        """The SSE body: one write per batch of deltas the engine had ready (one chunk per choice in it).

        The role chunk goes out with the first tokens, as vLLM sends it, so a client's time to
        first token is the time to the first generated token.
        """
        w = ChunkWriter(f"chatcmpl-{uuid.uuid4().hex}", "chat.completion.chunk", int(time.time()), model)
        first: dict[str, Any] = {}
        if req.return_token_ids:
            first["prompt_token_ids"] = prompt_ids
        head = w.event(
            [{"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
             for i in range(req.n)],
            **first,
        )
        state = _ChatStreamState(req.n)
        final: RequestOutput | None = None
        try:
            async for ev in events:
                if isinstance(ev, RequestOutput):
                    final = ev
                    continue
                out = [head] if head else []
                head = ""
                for d in merge_deltas(ev):
                    chunk = self._chat_delta_event(w, req, d, use_tools, state)
                    if chunk:
                        out.append(chunk)
                if out:
                    yield "".join(out)
            if head:
                yield head
            if req.include_usage_in_stream and final is not None:
                yield w.event([], usage=self._usage(len(prompt_ids), [final]), weight_version=final.weight_version)
        except Exception as exc:
            yield f"{head}data: {json.dumps(OpenAIError(500, str(exc)).body())}\n\n"
        yield DONE

    def _chat_delta_event(
        self, w: ChunkWriter, req: ChatRequest, d: StreamDelta, use_tools: bool, st: _ChatStreamState
    ) -> str:
        """The chunk for one (merged) delta of choice ``d.index``; "" when it carries nothing to send.

        With tools, text from a ``<tool_call>`` tag on is held back and the calls are sent, parsed,
        with the finish reason (a prefix that may still become the tag waits for the next delta).
        """
        i = d.index
        st.text[i] += d.text
        visible = st.text[i]
        if use_tools and not st.in_tool[i]:
            pos = visible.find(OPEN)
            if pos >= 0:
                st.in_tool[i] = True
                visible = visible[:pos]
            elif d.finish_reason is None:
                visible = visible[: len(visible) - tag_prefix_len(visible)]
        elif use_tools:
            visible = visible[: st.sent[i]]
        piece = visible[st.sent[i] :]
        st.sent[i] = len(visible)
        if d.finish_reason is None and not req.logprobs and not req.return_token_ids:
            return w.chat_content(i, piece) if piece else ""  # the common chunk, without building a dict
        c: dict[str, Any] = {"index": i, "delta": {}, "logprobs": None, "finish_reason": None}
        if piece:
            c["delta"]["content"] = piece
        if req.logprobs and d.token_ids:
            c["logprobs"] = self._chat_logprobs(d.token_ids, d.logprobs, d.top_logprobs or None)
        if req.return_token_ids:
            c["token_ids"] = d.token_ids
        if d.finish_reason is not None:
            finish = d.finish_reason
            text = st.text[i]
            if use_tools and finish == "stop":
                content, calls = parse_tool_calls(text)
                if calls:
                    finish = "tool_calls"
                    c["delta"]["tool_calls"] = [{"index": k, **tc} for k, tc in enumerate(calls)]
                    lead = (content or "")[st.sent[i] :]
                    if lead:
                        c["delta"]["content"] = c["delta"].get("content", "") + lead
            if finish != "tool_calls" and st.sent[i] < len(text):
                c["delta"]["content"] = c["delta"].get("content", "") + text[st.sent[i] :]
            c["finish_reason"] = finish
            c["stop_reason"] = d.stop_reason
        if c["delta"] or c["finish_reason"] or c.get("token_ids") or c["logprobs"]:
            return w.event([c])
        return ""

    # -- completions -----------------------------------------------------------------------
    def _prompts(self, prompt: Any) -> list[list[int]]:
        texts = [prompt] if isinstance(prompt, str) else [p for p in prompt if isinstance(p, str)]
        self.check_chars(sum(len(t) for t in texts), "prompt")
        if isinstance(prompt, str):
            return [self._encode(prompt)]
        if prompt and all(isinstance(p, int) for p in prompt):
            return [list(prompt)]
        out = []
        for p in prompt:
            out.append(self._encode(p) if isinstance(p, str) else list(p))
        if not out:
            raise OpenAIError(400, "prompt is empty", param="prompt")
        return out

    def _parse_completions(self, body: Any) -> tuple[CompletionRequest, str, list[list[int]]]:
        req: CompletionRequest = self.parse(CompletionRequest, body)
        model = self.check_model(req.model)
        self.check_constraints(req)
        return req, model, self._prompts(req.prompt)

    async def completions(self, body: Any) -> dict[str, Any] | AsyncIterator[str]:
        req, model, prompts = await parse_body(self._parse_completions, body)
        if any(not p for p in prompts):
            raise OpenAIError(400, "prompt is empty", param="prompt")
        params = req.sampling(
            max_tokens=req.max_tokens or 16, logprobs=req.logprobs is not None, top_logprobs=req.logprobs or 0
        )
        if req.stream:
            if len(prompts) != 1:
                raise OpenAIError(400, "streaming supports one prompt per request", param="prompt")
            events = self.engine.stream(prompts[0], params, req.n)
            return self._completion_stream(req, model, prompts[0], events)
        for p in prompts:  # validate every prompt before generating any
            self.engine.check_request(p, params, req.n)
        outs = await asyncio.gather(*[self.engine.generate(p, params, req.n) for p in prompts])
        choices = []
        for pi, out in enumerate(outs):
            for o in out.outputs:
                c: dict[str, Any] = {
                    "index": pi * req.n + o.index,
                    "text": o.text,
                    "logprobs": self._completion_logprobs(o.token_ids, o.logprobs or [], o.top_logprobs, 0)
                    if req.logprobs is not None
                    else None,
                    "finish_reason": o.finish_reason,
                    "stop_reason": o.stop_reason,
                }
                if req.return_token_ids:
                    c["prompt_token_ids"] = prompts[pi]
                    c["token_ids"] = o.token_ids
                choices.append(c)
        return {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": model,
            "choices": choices,
            "usage": self._usage(sum(len(p) for p in prompts), list(outs)),
            "weight_version": min(o.weight_version for o in outs),
        }

    async def _completion_stream(
        self, req: CompletionRequest, model: str, prompt_ids: list[int], events: AsyncIterator[Any]
    ) -> AsyncIterator[str]:
        """The SSE body: one write per batch of deltas the engine had ready (one chunk per choice in it)."""
        w = ChunkWriter(f"cmpl-{uuid.uuid4().hex}", "text_completion", int(time.time()), model)
        offsets = [0] * req.n
        batches = DeltaBatches(events)
        try:
            async for deltas in batches:
                out = []
                for d in deltas:
                    if d.finish_reason is None and req.logprobs is None and not req.return_token_ids:
                        out.append(w.completion_text(d.index, d.text))  # the common chunk
                        offsets[d.index] += len(d.text)
                        continue
                    c: dict[str, Any] = {
                        "index": d.index,
                        "text": d.text,
                        "logprobs": self._completion_logprobs(d.token_ids, d.logprobs, d.top_logprobs or None,
                                                              offsets[d.index])
                        if req.logprobs is not None
                        else None,
                        "finish_reason": d.finish_reason,
                        "stop_reason": d.stop_reason,
                    }
                    offsets[d.index] += len(d.text)
                    if req.return_token_ids:
                        c["token_ids"] = d.token_ids
                        c["prompt_token_ids"] = prompt_ids
                    out.append(w.event([c]))
                if out:
                    yield "".join(out)
            if req.include_usage_in_stream and batches.final is not None:
                yield w.event([], usage=self._usage(len(prompt_ids), [batches.final]))
        except Exception as exc:
            yield f"data: {json.dumps(OpenAIError(500, str(exc)).body())}\n\n"
        yield DONE

    # -- utilities -------------------------------------------------------------------------
    def models(self) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {"id": n, "object": "model", "created": self.created, "owned_by": "verifiers",
                 "max_model_len": self.engine.max_model_len}
                for n in self.names
            ],
        }

    def tokenize(self, body: Any) -> dict[str, Any]:
        req: TokenizeRequest = self.parse(TokenizeRequest, body)
        self.check_model(req.model)
        if (req.prompt is None) == (req.messages is None):
            raise OpenAIError(400, "give exactly one of 'prompt' or 'messages'", param="prompt")
        self.check_chars(_text_chars(req.messages) + len(req.prompt or ""), "messages" if req.messages else "prompt")
        if req.messages is not None:
            tools = [t.model_dump(exclude_none=True) for t in req.tools] if req.tools else None
            try:
                ids = render_chat(self.engine.tokenizer, req.messages, tools=tools,
                                  add_generation_prompt=req.add_generation_prompt)
            except Exception as exc:
                raise OpenAIError(400, f"the chat template could not render these messages: {exc}", param="messages") from None
        else:
            ids = list(self.engine.tokenizer(req.prompt, add_special_tokens=req.add_special_tokens)["input_ids"])
        return {"count": len(ids), "max_model_len": self.engine.max_model_len, "tokens": ids}

    def detokenize(self, body: Any) -> dict[str, Any]:
        req: DetokenizeRequest = self.parse(DetokenizeRequest, body)
        self.check_model(req.model)
        self.engine.check_token_ids(req.tokens, "tokens")
        return {"prompt": self.engine.tokenizer.decode(req.tokens)}

    def check_reload_path(self, path: str) -> Path:
        """The resolved checkpoint path; 403 when ``reload_dir`` is set and the path leaves it.

        Resolving first (symlinks, ``..``) means a link inside the directory cannot point out of it.
        """
        resolved = Path(path).expanduser().resolve()
        if self.reload_dir is not None and not resolved.is_relative_to(self.reload_dir):
            raise OpenAIError(403, f"reload paths must be under {self.reload_dir} (the server's --reload-dir); "
                              f"{path!r} is not", param="path")
        return resolved

    async def reload(self, body: Any) -> dict[str, Any]:
        req: ReloadRequest = self.parse(ReloadRequest, body)
        path = self.check_reload_path(req.path)
        try:
            version = await asyncio.to_thread(self.engine.load_weights_from_disk, path)
        except ConfigError as exc:  # includes a checkpoint that does not match the served model
            raise OpenAIError(400, str(exc), param="path") from None
        except (OSError, ValueError, RuntimeError) as exc:  # unreadable or corrupt files: nothing was applied
            raise OpenAIError(400, f"could not load a checkpoint from {req.path}: {exc}", param="path") from None
        return {"weight_version": version}


def _text_chars(value: Any) -> int:
    """Characters of every string inside ``value`` (messages, content parts, tool schemas)."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return sum(_text_chars(k) + _text_chars(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return sum(_text_chars(v) for v in value)
    return 0
