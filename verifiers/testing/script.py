"""The script of the scripted server and `ScriptedClient`: what to answer, when to fail, as data.

`ServerScript` (with its `ScriptedReply` rules and their `ScriptedToolCall`s) is a pydantic model
so it can cross a process boundary as JSON; `CompiledScript` turns it into the plain objects the
request path reads, so serving a request only touches dicts and strings. The renderers
(`render_chat`, `fill`, `tool_calls_text`) define the tokenisation both doubles share: one token
per character, a chat prompt rendered as ``<|role|>content\\n`` per message followed by
``<|assistant|>``, and an assistant message's tool calls rendered as
``json.dumps([{"name": ..., "arguments": ...}])`` right after its content.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

_PLACEHOLDER_RE = re.compile(r"\{(last_user|last_message|reversed_last_user|turn)\}")



# -- the script ------------------------------------------------------------------------


class ScriptedToolCall(BaseModel):
    """One tool call of a scripted reply.

    ``arguments`` is sent to the client verbatim (never parsed or re-encoded), so a
    test can send malformed JSON and check how the code under test copes.
    """

    name: str
    arguments: str = "{}"


class ScriptedReply(BaseModel):
    """One rule of the script: a reply and the conditions under which it is given.

    ``content`` may contain ``{last_user}``, ``{last_message}``, ``{reversed_last_user}``
    and ``{turn}`` (the number of assistant messages in the request). They are replaced
    in a single pass over the template, so other braces are safe and text coming from
    the request is never substituted again.
    """

    content: str | None = None
    tool_calls: list[ScriptedToolCall] = Field(default_factory=list)
    finish_reason: str | None = None
    """Defaults to ``"tool_calls"`` when the reply has tool calls, else ``"stop"``."""
    match: str | None = None
    """Regex searched in the content of the request's last message; the rule applies only if found."""
    turn: int | None = None
    """The rule applies only when the request holds exactly this many assistant messages."""
    latency_s: float | None = None
    """Overrides `ServerScript.latency_s` for this reply."""


class ServerScript(BaseModel):
    """Everything the server does, as data (JSON-serialisable for `ScriptedServer.spawn`).

    The first reply whose ``match``/``turn`` conditions hold is used; if none holds, the
    last one is. Failure injection happens in this order: ``fail_first``, then
    ``error_rate``, then ``hang_rate`` (a hang delays a normal answer), then the
    ``context_length`` check.
    """

    replies: list[ScriptedReply] = Field(
        default_factory=lambda: [ScriptedReply(content="{last_user}")], min_length=1
    )
    latency_s: float = Field(0.0, ge=0.0)
    error_rate: float = Field(0.0, ge=0.0, le=1.0)
    error_statuses: list[int] = Field(default_factory=lambda: [500, 429], min_length=1)
    fail_first: int = Field(0, ge=0)
    """The first N requests after the script is installed fail with ``fail_first_status``."""
    fail_first_status: int = 500
    hang_rate: float = Field(0.0, ge=0.0, le=1.0)
    hang_s: float = Field(3600.0, ge=0.0)
    seed: int = 0
    """Seeds the RNG behind ``error_rate``/``hang_rate``/``error_statuses``."""
    context_length: int | None = None
    """Prompts longer than this many tokens get vLLM's HTTP 400 "maximum context length" error."""
    model: str = "scripted"
    max_tokens_truncates: bool = True
    """Cut replies longer than the request's max_tokens and report ``finish_reason="length"``."""


# -- the compiled script (plain objects, read on every request) ----------------------------


@dataclass(frozen=True, slots=True)
class Rule:
    """One compiled `ScriptedReply`."""

    content: str | None
    templated: bool
    tool_calls: tuple[tuple[str, str], ...]
    tool_text: str
    finish_reason: str
    pattern: re.Pattern[str] | None
    turn: int | None
    latency_s: float


class CompiledScript:
    """A script turned into what the request path needs, plus its mutable RNG state.

    Swapping the whole object is how `set_script` stays thread-safe without locks.
    """

    __slots__ = (
        "context_length",
        "error_rate",
        "error_statuses",
        "fail_first_status",
        "fail_remaining",
        "hang_rate",
        "hang_s",
        "model",
        "rng",
        "rules",
        "script",
        "truncates",
    )

    def __init__(self, script: ServerScript) -> None:
        self.script = script
        self.rules = tuple(_compile_rule(r, script.latency_s) for r in script.replies)
        self.error_rate = script.error_rate
        self.error_statuses = tuple(script.error_statuses)
        self.fail_remaining = script.fail_first
        self.fail_first_status = script.fail_first_status
        self.hang_rate = script.hang_rate
        self.hang_s = script.hang_s
        self.rng = random.Random(script.seed)
        self.context_length = script.context_length
        self.model = script.model
        self.truncates = script.max_tokens_truncates

    def pick(self, last_message: str, turn: int) -> Rule:
        """The first rule whose conditions hold, else the last one."""
        for rule in self.rules:
            if rule.turn is not None and rule.turn != turn:
                continue
            if rule.pattern is not None and rule.pattern.search(last_message) is None:
                continue
            return rule
        return self.rules[-1]


def _compile_rule(reply: ScriptedReply, default_latency_s: float) -> Rule:
    calls = tuple((tc.name, tc.arguments) for tc in reply.tool_calls)
    finish = reply.finish_reason or ("tool_calls" if calls else "stop")
    return Rule(
        content=reply.content,
        templated=reply.content is not None and _PLACEHOLDER_RE.search(reply.content) is not None,
        tool_calls=calls,
        tool_text=tool_calls_text(calls),
        finish_reason=finish,
        pattern=re.compile(reply.match) if reply.match is not None else None,
        turn=reply.turn,
        latency_s=default_latency_s if reply.latency_s is None else reply.latency_s,
    )


def tool_calls_text(calls: tuple[tuple[str, str], ...] | list[tuple[str, str]]) -> str:
    """The token text of tool calls, shared by completions and prompt rendering."""
    if not calls:
        return ""
    return json.dumps([{"name": name, "arguments": args} for name, args in calls])


# -- renderers, shared by the server and ScriptedClient ----------------------------------


def _text_of(content: Any) -> str:
    """Message content as text: a string, a list of ``{"type": "text", "text": ...}`` parts, or None."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text") or "" for p in content if isinstance(p, dict))
    raise TypeError(f"unsupported message content: {type(content).__name__}")


def _request_tool_calls_text(tool_calls: list[Any]) -> str:
    calls = []
    for tc in tool_calls:
        fn = tc.get("function") or {}
        calls.append((fn.get("name", ""), fn.get("arguments", "")))
    return tool_calls_text(calls)


def render_chat(messages: list[dict[str, Any]]) -> tuple[str, str, str, int]:
    """Render messages as the prompt text; also return last user text, last text, turn."""
    parts: list[str] = []
    last_user = last_message = ""
    turn = 0
    for m in messages:
        role = m["role"]
        text = _text_of(m.get("content"))
        rendered = text
        if role == "assistant":
            turn += 1
            tool_calls = m.get("tool_calls")
            if tool_calls:
                rendered = text + _request_tool_calls_text(tool_calls)
        elif role == "user":
            last_user = text
        parts.append(f"<|{role}|>{rendered}\n")
        last_message = text
    parts.append("<|assistant|>")
    return "".join(parts), last_user, last_message, turn


def fill(rule: Rule, last_user: str, last_message: str, turn: int) -> str | None:
    """The rule's content with its placeholders replaced (one pass: request text is never re-substituted)."""
    if not rule.templated:
        return rule.content
    values = {
        "last_user": last_user,
        "last_message": last_message,
        "reversed_last_user": last_user[::-1],
        "turn": str(turn),
    }
    assert rule.content is not None
    return _PLACEHOLDER_RE.sub(lambda m: values[m.group(1)], rule.content)

