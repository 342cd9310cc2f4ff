"""``POST /inference/v1/generate``: token ids in, token ids and logprobs out, as vLLM's endpoint does.

Trainers that render prompts themselves (verifiers v1's training client, prime-rl) send token ids
and read back the sampled ids with their logprobs, never text: nothing is re-tokenised on either
side. The request and response follow vLLM's ``token_in_token_out`` protocol (``token_ids``,
``sampling_params``, ``request_id``, ``output_mode``; ``choices[].token_ids``, ``finish_reason``,
``stop_reason``, ``logprobs.content[]``). Each logprob entry names its token both ways vLLM has
written it (``token_id``: the integer, and ``token``: ``"token_id:<id>"``), so either generation
of client reads it. What our engine cannot do (streaming here, prompt logprobs, the sampling
mask) is refused by name rather than ignored.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from verifiers.inference.engine.sampling import SamplingParams
from verifiers.inference.server.protocol import OpenAIError

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


class GenerateRequest(BaseModel):
    """vLLM's ``GenerateRequest``, the fields a token-in client sends."""

    model_config = ConfigDict(extra="forbid")

    request_id: str | None = None
    token_ids: list[int] = Field(min_length=1)
    sampling_params: GenerateSampling = Field(default_factory=GenerateSampling)
    model: str | None = None
    stream: bool = False
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
    if req.stream:
        raise OpenAIError(400, "stream=true is not supported on /inference/v1/generate here; send stream=false",
                          param="stream")
    if any(t < 0 for t in req.token_ids):
        raise OpenAIError(400, "token_ids must not contain negative values", param="token_ids")
    params = req.sampling_params.engine_params()
    api.engine.check_request(req.token_ids, params, req.sampling_params.n)
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
