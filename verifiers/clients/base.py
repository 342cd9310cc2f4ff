"""Request bodies and response parsing shared by every HTTP client adapter."""

from __future__ import annotations

from typing import Any

from verifiers.clients.errors import OVERLONG_MARKERS, error_for_status
from verifiers.clients.response import ModelResponse, parse_chat_response, parse_completion_response
from verifiers.types import SamplingArgs

# OVERLONG_MARKERS and error_for_status live in clients/errors.py; re-exported for old imports.
__all__ = ["OVERLONG_MARKERS", "RequestAdapter", "build_body", "error_for_status"]


def build_body(model: str, sampling_args: SamplingArgs | None, **fields: Any) -> dict[str, Any]:
    """Request body: fixed fields, then sampling args, with ``extra_body`` flattened in (0.1.x style)."""
    body: dict[str, Any] = {"model": model, **fields}
    if sampling_args:
        for k, v in sampling_args.items():
            if k == "extra_body" and isinstance(v, dict):
                body.update({kk: vv for kk, vv in v.items() if vv is not None})
            elif v is not None:
                body[k] = v
    return body


class RequestAdapter:
    """Request bodies and response parsing shared by the async and sync SDK adapters."""

    async def _post(self, path: str, body: dict[str, Any], timeout: float | None) -> dict[str, Any]:
        raise NotImplementedError

    async def chat(
        self,
        model: str,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        sampling_args: SamplingArgs | None = None,
        timeout: float | None = None,
    ) -> ModelResponse:
        body = build_body(model, sampling_args, messages=messages)
        if tools:
            body["tools"] = tools
        return parse_chat_response(await self._post("/chat/completions", body, timeout))

    async def complete(
        self,
        model: str,
        prompt: str | list[int],
        *,
        sampling_args: SamplingArgs | None = None,
        timeout: float | None = None,
    ) -> ModelResponse:
        body = build_body(model, sampling_args, prompt=prompt)
        return parse_completion_response(await self._post("/completions", body, timeout))
