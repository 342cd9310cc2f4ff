"""ScriptedClient: an in-process `ChatClient` for environment unit tests.

No socket, no server: replies come from a list (consumed in order), a function
of the request, or a `ServerScript` (the same rules the scripted HTTP server
uses). Token ids are one per character (``ord``), like the scripted server, so
token-level code paths can be exercised too. For tests of the real HTTP path use
`ScriptedServer`; this client is for fast, focused environment tests.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from verifiers.clients.response import ModelResponse
from verifiers.errors import OverlongPromptError
from verifiers.testing.script import CompiledScript, ServerScript, fill, render_chat, tool_calls_text
from verifiers.types import SamplingArgs, TurnTokens, Usage

Reply = str | dict[str, Any] | BaseException
ReplyFn = Callable[[list[dict[str, Any]] | str], Reply]


@dataclass
class RecordedCall:
    model: str
    prompt: list[dict[str, Any]] | str
    tools: list[dict[str, Any]] | None
    sampling_args: SamplingArgs = field(default_factory=dict)


class ScriptedClient:
    """Scripted replies without HTTP.

    ``replies`` may be:

    * a list of replies used in order (the last one repeats when the list runs out);
    * a function ``(messages_or_prompt) -> reply``;
    * a `ServerScript` (regex / turn rules, placeholders, ``context_length``).

    A reply is a string (assistant text), a dict ``{"content": ..., "tool_calls":
    [{"name": ..., "arguments": "<raw json>"}], "finish_reason": ...}``, or an
    exception instance, which is raised (to test error paths).
    """

    def __init__(
        self, replies: Sequence[Reply] | ReplyFn | ServerScript = ("",), latency_s: float = 0.0
    ) -> None:
        self._script = CompiledScript(replies) if isinstance(replies, ServerScript) else None
        self._fn = replies if callable(replies) and not isinstance(replies, ServerScript) else None
        self._list = list(replies) if self._script is None and self._fn is None else []  # type: ignore[arg-type]
        self._pos = 0
        self._ids = itertools.count()
        self.latency_s = latency_s
        self.calls: list[RecordedCall] = []

    def _next(self, prompt: list[dict[str, Any]] | str) -> Reply:
        if self._fn is not None:
            return self._fn(prompt)
        if self._script is not None:
            messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
            text, last_user, last_message, turn = render_chat(messages)
            if self._script.context_length is not None and len(text) > self._script.context_length:
                return OverlongPromptError(
                    f"This model's maximum context length is {self._script.context_length} tokens. "
                    f"However, you requested {len(text)} tokens."
                )
            rule = self._script.pick(last_message, turn)
            return {
                "content": fill(rule, last_user, last_message, turn),
                "tool_calls": [{"name": n, "arguments": a} for n, a in rule.tool_calls],
                "finish_reason": rule.finish_reason,
            }
        if not self._list:
            return ""
        reply = self._list[min(self._pos, len(self._list) - 1)]
        self._pos += 1
        return reply

    def _respond(self, prompt: list[dict[str, Any]] | str) -> ModelResponse:
        reply = self._next(prompt)
        if isinstance(reply, BaseException):
            raise reply
        if isinstance(reply, str):
            reply = {"content": reply}
        content = reply.get("content")
        tool_calls = [
            {
                "id": f"call_{next(self._ids)}",
                "type": "function",
                "function": {"name": tc["name"], "arguments": tc.get("arguments", "")},
            }
            for tc in reply.get("tool_calls") or []
        ]
        finish = reply.get("finish_reason") or ("tool_calls" if tool_calls else "stop")
        prompt_text = prompt if isinstance(prompt, str) else render_chat(prompt)[0]
        out_text = (content or "") + tool_calls_text(
            [(tc["function"]["name"], tc["function"]["arguments"]) for tc in tool_calls]
        )
        return ModelResponse(
            content=content,
            tool_calls=tool_calls,
            finish_reason=finish,
            usage=Usage(prompt_tokens=len(prompt_text), completion_tokens=len(out_text)),
            tokens=TurnTokens(
                prompt_ids=[ord(c) for c in prompt_text],
                completion_ids=[ord(c) for c in out_text],
                completion_logprobs=[-0.1] * len(out_text),
                finish_reason=finish,
            ),
        )

    async def chat(
        self,
        model: str,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        sampling_args: SamplingArgs | None = None,
        timeout: float | None = None,
    ) -> ModelResponse:
        self.calls.append(RecordedCall(model, [dict(m) for m in messages], tools, dict(sampling_args or {})))
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        return self._respond(messages)

    async def complete(
        self,
        model: str,
        prompt: str,
        *,
        sampling_args: SamplingArgs | None = None,
        timeout: float | None = None,
    ) -> ModelResponse:
        self.calls.append(RecordedCall(model, prompt, None, dict(sampling_args or {})))
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        return self._respond(prompt)
