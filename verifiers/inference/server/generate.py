"""``POST /inference/v1/generate``: token ids in, token ids and logprobs out, as vLLM's endpoint does.

Trainers that render prompts themselves (verifiers v1's training client, prime-rl) send token ids
and read back the sampled ids with their logprobs, never text: nothing is re-tokenised on either
side. The request and response follow vLLM's ``token_in_token_out`` protocol (``token_ids``,
``sampling_params``, ``request_id``, ``output_mode``; ``choices[].token_ids``, ``finish_reason``,
``stop_reason``, ``logprobs.content[]``). Each logprob entry names its token both ways vLLM has
written it (``token_id``: the integer, and ``token``: ``"token_id:<id>"``), so either generation
of client reads it. ``stream=true`` answers as vLLM's does: server-sent events, one chunk per choice
per batch of new tokens (``token_ids`` and ``logprobs`` of the new tokens only, ``finish_reason`` on a
choice's last chunk, ``prompt_token_ids`` on the first chunk when asked), a usage chunk with no
choices when ``stream_options.include_usage`` is set, then ``data: [DONE]``. What our engine cannot
do (prompt logprobs, per-request sampling settings it lacks) is refused by name rather than
ignored. vLLM's ``sampling_mask`` (the token support set of each sampled token, which vLLM returns
only when its server is started with it) is never sent: clients treat it as optional (verifiers
v1's training client reads an absent mask as none).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from verifiers.inference.engine.sampling import SamplingParams
from verifiers.inference.server.protocol import OpenAIError
from verifiers.inference.server.sse import DONE, DeltaBatches

# vLLM sampling fields that change nothing here (we detokenise only in "text" mode, and the same way)
_HARMLESS = {"skip_special_tokens", "spaces_between_special_tokens", "detokenize", "output_kind",
             "truncate_prompt_tokens", "presence_penalty", "frequency_penalty"}


class GenerateSampling(BaseModel):
    """The ``sampling_params`` we honour (vLLM's names and defaults: ``max_tokens`` 16)."""

    model_config = ConfigDict(extra="allow")

    n: int = Field(1, ge=1, le=64)
    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int | None = None
    min_p: float = Field(0.0, ge=0.0, le=1.0)
    repetition_penalty: float = Field(1.0, gt=0.0)
    max_tokens: int = Field(16, ge=1)
    min_tokens: int = Field(0, ge=0)
    stop: list[str] | str | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    seed: int | None = None
    logprobs: int | None = Field(None, ge=0, le=20)
    include_stop_str_in_output: bool = False
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0

    def engine_params(self) -> SamplingParams:
        unknown = sorted(set(self.model_extra or {}) - _HARMLESS)
        if unknown:
            raise OpenAIError(400, f"sampling_params {', '.join(unknown)} not supported by this server",
                              param="sampling_params")
        if self.presence_penalty or self.frequency_penalty:
            raise OpenAIError(400, "presence_penalty and frequency_penalty are not supported by this server",
                              param="sampling_params")
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return SamplingParams(
            temperature=self.temperature, top_p=self.top_p, top_k=-1 if self.top_k in (None, 0) else self.top_k,
            min_p=self.min_p, repetition_penalty=self.repetition_penalty, max_tokens=self.max_tokens,
            min_tokens=self.min_tokens, stop=stop, stop_token_ids=list(self.stop_token_ids or []),
            ignore_eos=self.ignore_eos, seed=self.seed, logprobs=self.logprobs is not None,
            top_logprobs=self.logprobs or 0, include_stop_str_in_output=self.include_stop_str_in_output)


class StreamOptions(BaseModel):
    """vLLM's ``stream_options``: a final usage chunk, and usage on every chunk."""

    model_config = ConfigDict(extra="forbid")

    include_usage: bool = False
    continuous_usage_stats: bool = False


class GenerateRequest(BaseModel):
    """vLLM's ``GenerateRequest``, the fields a token-in client sends."""

    model_config = ConfigDict(extra="forbid")

    request_id: str | None = None
    token_ids: list[int] = Field(min_length=1)
    sampling_params: GenerateSampling = Field(default_factory=GenerateSampling)
    model: str | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    output_mode: Literal["tokens", "text"] = "tokens"
    return_token_ids: bool | None = None
    cache_salt: str | None = None
    priority: int = 0


def _entry(token_id: int, logprob: float, rank: int | None = None) -> dict[str, Any]:
    return {"token_id": token_id, "token": f"token_id:{token_id}", "logprob": logprob, "rank": rank}


def logprob_content(ids: list[int], lps: list[float], tops: list[list[tuple[int, float]]] | None) -> list[dict]:
    """One entry per sampled token: its id and logprob, then its top candidates in rank order."""
    content = []
    for i, (token_id, lp) in enumerate(zip(ids, lps, strict=True)):
        row = tops[i] if tops else []
        rank = next((r + 1 for r, (t, _) in enumerate(row) if t == token_id), None)
        entry = _entry(token_id, lp, rank)
        entry["top_logprobs"] = [_entry(t, v, r + 1) for r, (t, v) in enumerate(row)]
        content.append(entry)
    return content


async def generate(api: Any, body: Any) -> dict[str, Any]:
    """Answer one ``/inference/v1/generate`` body with the embedded engine behind ``api``."""
    req: GenerateRequest = api.parse(GenerateRequest, body)
    model = api.check_model(req.model)
    if any(t < 0 for t in req.token_ids):
        raise OpenAIError(400, "token_ids must not contain negative values", param="token_ids")
    if req.stream_options is not None and not req.stream:
        raise OpenAIError(400, "stream_options needs stream=true", param="stream_options")
    params = req.sampling_params.engine_params()
    api.engine.check_request(req.token_ids, params, req.sampling_params.n)
    if req.stream:
        return generate_stream(req, params, api.engine.stream(req.token_ids, params, req.sampling_params.n))
    out = await api.engine.generate(req.token_ids, params, req.sampling_params.n)
    choices = []
    for o in out.outputs:
        choice: dict[str, Any] = {
            "index": o.index, "finish_reason": o.finish_reason, "stop_reason": o.stop_reason,
            "token_ids": list(o.token_ids),
            "logprobs": {"content": logprob_content(o.token_ids, o.logprobs or [], o.top_logprobs)}
            if params.logprobs else None,
        }
        if req.output_mode == "text":
            choice["text"] = o.text
        choices.append(choice)
    completion = sum(len(o.token_ids) for o in out.outputs)
    response: dict[str, Any] = {
        "request_id": req.request_id or f"gen-{uuid.uuid4().hex}", "model": model, "created": int(time.time()),
        "output_mode": req.output_mode, "choices": choices,
        "usage": {"prompt_tokens": len(req.token_ids), "completion_tokens": completion,
                  "total_tokens": len(req.token_ids) + completion},
        "weight_version": out.weight_version,
    }
    if req.return_token_ids:
        response["prompt_token_ids"] = list(req.token_ids)
    return response


async def generate_stream(req: GenerateRequest, params: SamplingParams,
                          events: AsyncIterator[Any]) -> AsyncIterator[str]:
    """The SSE body of a streamed generate: vLLM's chunk shapes (see the module docstring)."""
    request_id = req.request_id or f"gen-{uuid.uuid4().hex}"
    options = req.stream_options or StreamOptions()
    prompt_ids = list(req.token_ids) if req.return_token_ids else None
    generated = [0] * req.sampling_params.n
    batches = DeltaBatches(events)

    def usage(completion: int) -> dict[str, int]:
        return {"prompt_tokens": len(req.token_ids), "completion_tokens": completion,
                "total_tokens": len(req.token_ids) + completion}

    try:
        async for deltas in batches:
            out = []
            for d in deltas:
                if not d.token_ids and d.finish_reason is None and not (req.output_mode == "text" and d.text):
                    continue
                generated[d.index] += len(d.token_ids)
                choice: dict[str, Any] = {
                    "index": d.index, "finish_reason": d.finish_reason, "stop_reason": d.stop_reason,
                    "token_ids": list(d.token_ids),
                    "logprobs": {"content": logprob_content(d.token_ids, d.logprobs, d.top_logprobs or None)}
                    if params.logprobs else None,
                }
                if req.output_mode == "text":
                    choice["text"] = d.text
                chunk: dict[str, Any] = {"request_id": request_id, "output_mode": req.output_mode, "choices": [choice]}
                if prompt_ids is not None:
                    chunk["prompt_token_ids"], prompt_ids = prompt_ids, None
                if options.continuous_usage_stats:
                    chunk["usage"] = usage(generated[d.index])
                out.append(f"data: {json.dumps(chunk)}\n\n")
            if out:
                yield "".join(out)
        if options.include_usage:
            last = {"request_id": request_id, "output_mode": req.output_mode, "choices": [],
                    "usage": usage(sum(generated))}
            if batches.final is not None:
                last["weight_version"] = batches.final.weight_version
            yield f"data: {json.dumps(last)}\n\n"
    except Exception as exc:
        yield f"data: {json.dumps(OpenAIError(500, str(exc)).body())}\n\n"
    yield DONE
