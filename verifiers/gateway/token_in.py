"""Token-exact across turns: continue an earlier call of the session from its exact token ids.

An agent program sends its whole transcript on every call: the earlier messages, the reply it
got (as text, maybe re-serialised) and new tool/user messages. Sent as messages, the server
would render and tokenise that text again, and the tokens of the earlier reply need not be the
ones the model sampled (BPE merges differently across a boundary, arguments get re-serialised):
the trainer would then learn from a sequence the sampler never produced. When the new messages
extend an earlier call (its messages + its reply + a tail of tool/user messages) this hook sends
``earlier prompt_ids + completion_ids + ids of the rendered tail`` to ``/v1/completions`` as a
token-id prompt instead, and turns the text back into a chat reply (tool calls parsed the way the
embedded server parses them, after splitting off ``<think>`` reasoning when the server's chat
path does). A forced ``tool_choice`` is honoured as the embedded server honours it: the tool
call's opening (and a named tool's name) is appended to the prompt and sampling fills in the
rest. A reply cut by ``length`` is continued too: the template closes a cut reply like any other,
so its whole closing follows the sampled ids. Anything it cannot do exactly (history rewritten
by the program, a reply ended by a stop string, a template whose tail is not a clean suffix)
returns the reason as a string, and the session sends the messages as usual.

Use: ``gateway.open_session(client, model, ..., token_prompt=token_prompt_for(tokenizer))`` with
the policy's tokenizer (the one the server serves).
"""

from __future__ import annotations

import json
import weakref
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from verifiers.clients.response import ModelResponse
from verifiers.errors import BadRequestError, OverlongPromptError
from verifiers.gateway.records import NOT_FOLLOW_UPS, GatewayCall
from verifiers.gateway.tail import TemplateTail
from verifiers.inference.server.tool_parser import forced_text, parse_tool_calls
from verifiers.types import TurnTokens

if TYPE_CHECKING:
    from verifiers.gateway.session import Session

ToolParser = Callable[[str], tuple[str | None, list[dict[str, Any]]]]

# Fields of a chat request that the completions API does not take (or that token-in rules out).
_CHAT_ONLY = ("tool_choice", "parallel_tool_calls", "response_format", "logprobs", "top_logprobs",
              "max_completion_tokens", "max_tokens", "extra_body")
_CHAT_ONLY_EXTRA = ("chat_template_kwargs", "chat_template", "add_generation_prompt", "continue_final_message",
                    "documents", "tools")


class TokenInStats(BaseModel):
    """How one session's calls were sent: as token ids continuing an earlier call, or as messages."""

    token_in: int = 0
    plain: int = 0
    reasons: dict[str, int] = Field(default_factory=dict)
    """Why calls went plain (``first_call``, ``no_earlier_call``, ``stop_string``, ...), counted."""

    @property
    def follow_ups(self) -> int:
        """Calls that extended an earlier call (token-in or not): what ``token_in`` is a share of."""
        return self.token_in + sum(n for why, n in self.reasons.items() if why not in NOT_FOLLOW_UPS)



# -- comparing messages the way a program may have re-serialised them ---------------------------
def _text(content: Any) -> Any:
    if content is None:
        return ""
    if isinstance(content, list) and len(content) == 1 and isinstance(content[0], dict) \
            and content[0].get("type") == "text":
        return content[0].get("text") or ""
    return content


def _arguments(args: Any) -> Any:
    if isinstance(args, str):
        try:
            return json.loads(args)
        except json.JSONDecodeError:
            return args
    return args


def canonical(message: dict[str, Any]) -> str:
    """A message's meaning as one string: role, content, tool calls (name + parsed arguments).

    Equal for a program that re-serialises tool call arguments, drops ``null`` fields, sends
    ``""`` for ``None`` or one text part for a string. Tool call ids of assistant messages are
    left out (the sampled tokens do not depend on them); a tool message keeps ``tool_call_id``.
    """
    out: dict[str, Any] = {"role": message.get("role"), "content": _text(message.get("content"))}
    calls = message.get("tool_calls") or []
    if calls:
        out["tool_calls"] = [
            {"name": (c.get("function") or {}).get("name"), "arguments": _arguments((c.get("function") or {}).get("arguments"))}
            for c in calls if isinstance(c, dict)
        ]
    if message.get("role") != "assistant":
        for key in ("name", "tool_call_id"):
            if message.get(key) is not None:
                out[key] = message[key]
    return json.dumps(out, sort_keys=True, ensure_ascii=False, default=str)


def _tools_key(tools: Any) -> str:
    return json.dumps(tools or None, sort_keys=True, default=str)


def find_extended(
    calls: list[GatewayCall], messages: list[dict[str, Any]], tools: Any, canon: Callable[[GatewayCall], list[str]]
) -> tuple[GatewayCall, list[dict[str, Any]]] | str:
    """The latest answered call whose messages + reply start ``messages``, and the tail after it.

    Sub-agents interleave their calls in one session, so the latest call that is a prefix of
    this one is its parent, whatever came in between. Returns a reason string when none fits.
    """
    new = [canonical(m) for m in messages]
    key = _tools_key(tools)
    for call in sorted(calls, key=lambda c: c.seq, reverse=True):
        if call.reply is None or call.status != 200 or len(call.messages) + 1 >= len(messages):
            continue
        k = len(call.messages)
        if canon(call) != new[:k] or canonical(call.reply) != new[k] or _tools_key(call.tools) != key:
            continue
        tail = messages[k + 1:]
        if any(m.get("role") not in ("user", "tool") for m in tail):
            return "tail_not_user_or_tool"
        return call, tail
    return "no_earlier_call"


# -- the request and the reply -------------------------------------------------------------------
def completion_args(args: dict[str, Any], n_prompt: int, max_model_len: int | None) -> dict[str, Any] | str:
    """The chat call's sampling args for ``/v1/completions``, or why they cannot be carried over."""
    if args.get("response_format") is not None:
        return "response_format"
    out = {k: v for k, v in args.items() if k not in _CHAT_ONLY}
    max_tokens = args.get("max_completion_tokens") or args.get("max_tokens")
    if max_tokens is None:
        if max_model_len is None:
            return "no_max_tokens"  # /v1/completions defaults to 16 tokens; chat to the context
        max_tokens = max_model_len - n_prompt
        if max_tokens < 1:
            return "no_room"
    out["max_tokens"] = int(max_tokens)
    if args.get("logprobs"):
        out["logprobs"] = int(args.get("top_logprobs") or 0)  # an int here, not chat's bool
    extra = {k: v for k, v in (args.get("extra_body") or {}).items() if k not in _CHAT_ONLY_EXTRA}
    extra["return_token_ids"] = True
    out["extra_body"] = extra
    return out


def _chat_logprobs(choice: dict[str, Any]) -> dict[str, Any] | None:
    lp = choice.get("logprobs") or {}
    tokens, values = lp.get("tokens") or [], lp.get("token_logprobs") or []
    if not tokens:
        return None
    tops = lp.get("top_logprobs") or [None] * len(tokens)
    return {"content": [
        {"token": t, "logprob": v, "bytes": list(t.encode()),
         "top_logprobs": [{"token": a, "logprob": b, "bytes": list(a.encode())} for a, b in (top or {}).items()]}
        for t, v, top in zip(tokens, values, tops, strict=False)
    ]}


def split_reasoning(text: str) -> tuple[str | None, str]:
    """``<think>…</think>`` split off the content as vLLM's ``qwen3`` reasoning parser splits it
    (no closing tag: all content)."""
    before, start, rest = text.partition("<think>")
    body = rest if start else before
    if "</think>" not in body:
        return None, text
    reasoning, _, content = body.partition("</think>")
    return reasoning, content


def forced_prefix(tool_choice: Any, tools: Any) -> str | None:
    """The text a ``tool_choice`` forces before sampling ("" when nothing is forced), or None
    when it is not one the gateway can honour here (the chat path answers it, errors included)."""
    if tool_choice in (None, "auto", "none"):
        return ""
    if tool_choice == "required":
        return forced_text(None) if tools else None
    if not isinstance(tool_choice, dict) or tool_choice.get("type") != "function":
        return None
    name = (tool_choice.get("function") or {}).get("name")
    known = {(t.get("function") or {}).get("name") for t in tools or [] if isinstance(t, dict)}
    return forced_text(name) if isinstance(name, str) and name in known else None


def chat_response(
    completion: ModelResponse, prompt_ids: list[int], tools: Any, parse_tools: ToolParser, *,
    forced: str = "", reasoning: bool = False,
) -> ModelResponse:
    """A ``/v1/completions`` answer as the chat answer the program expects (and the trainer records).

    ``forced`` is the tool call opening that was appended to the prompt (it is part of the reply's
    text, as on the chat path); ``reasoning`` splits ``<think>`` off into ``reasoning_content``.
    """
    text = forced + (completion.content or "")
    thought: str | None = None
    if reasoning:
        thought, text = split_reasoning(text)
    content: str | None = text
    calls: list[dict[str, Any]] = []
    finish = completion.finish_reason
    if tools and finish == "stop":
        content, calls = parse_tools(text)
        if calls:
            finish = "tool_calls"
    tokens = completion.tokens
    if tokens is not None:
        tokens = TurnTokens(prompt_ids=list(tokens.prompt_ids or prompt_ids), completion_ids=tokens.completion_ids,
                            completion_logprobs=tokens.completion_logprobs, finish_reason=finish)
    raw_choice = ((completion.raw or {}).get("choices") or [{}])[0]
    usage = completion.usage
    message: dict[str, Any] = {"role": "assistant", "content": content, "tool_calls": calls}
    if thought is not None:
        message["reasoning_content"] = thought
    raw = {
        "choices": [{"index": 0, "message": message, "logprobs": _chat_logprobs(raw_choice), "finish_reason": finish}],
        "usage": {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
                  "total_tokens": usage.prompt_tokens + usage.completion_tokens},
    }
    return ModelResponse(content=content, tool_calls=calls, finish_reason=finish, usage=usage, tokens=tokens, raw=raw)


# -- the hook ------------------------------------------------------------------------------------
class _SessionState:
    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.canon: dict[int, list[str]] = {}


class TokenIn:
    """The `verifiers.gateway.session.TokenPrompt` hook for one tokenizer (the served policy's).

    ``max_model_len`` lets a call without ``max_tokens`` go token-in (the completions API would
    otherwise stop at 16 tokens); ``parse_tools`` is the server's tool-call format (Hermes
    ``<tool_call>`` blocks, as the embedded server and vLLM's ``hermes`` parser read them).
    ``reasoning`` splits ``<think>`` off into ``reasoning_content``: True, False, or None to do
    what the server's chat path did for the call being continued (split if its reply was).
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        max_model_len: int | None = None,
        parse_tools: ToolParser = parse_tool_calls,
        reasoning: bool | None = None,
        **template_kwargs: Any,
    ) -> None:
        self.tail = TemplateTail(tokenizer, **template_kwargs)
        self.max_model_len = max_model_len
        self.parse_tools = parse_tools
        self.reasoning = reasoning
        self._sessions: weakref.WeakKeyDictionary[Any, _SessionState] = weakref.WeakKeyDictionary()

    def _state(self, session: Session) -> _SessionState:
        state = self._sessions.get(session)
        if state is None:
            state = self._sessions[session] = _SessionState()
        return state

    def stats(self, session: Session) -> TokenInStats:
        """This session's counts (token-in calls agree with ``GatewayCall.token_in``)."""
        counts = self._state(session).counts
        reasons = {k: v for k, v in counts.items() if k != "token_in"}
        return TokenInStats(token_in=counts["token_in"], plain=sum(reasons.values()), reasons=reasons)

    def plan(
        self, session: Session, messages: list[dict[str, Any]], tools: Any, args: dict[str, Any]
    ) -> tuple[list[int], dict[str, Any], GatewayCall, str] | str:
        """The token-id prompt, completions args, the call it continues and the forced tool-call
        text for this call, or why it goes as messages."""
        state = self._state(session)

        def canon(call: GatewayCall) -> list[str]:
            if call.seq not in state.canon:
                state.canon[call.seq] = [canonical(m) for m in call.messages]
            return state.canon[call.seq]

        found = find_extended(session.calls, messages, tools, canon)
        if isinstance(found, str):
            return "first_call" if len(session.calls) <= 1 else found
        earlier, tail = found
        tokens = earlier.tokens
        if tokens is None:
            return "earlier_without_tokens"
        finish = tokens.finish_reason or earlier.finish_reason
        if self.tail.bridge(tokens.completion_ids, finish) is None:
            return "stop_string" if finish in ("stop", "tool_calls") else "open_turn"
        forced = forced_prefix(args.get("tool_choice"), tools)
        if forced is None:
            return "tool_choice"
        template_kwargs = dict((args.get("extra_body") or {}).get("chat_template_kwargs") or {})
        more = self.tail.continuation_ids(tokens.completion_ids, finish, messages[len(earlier.messages)], tail, tools,
                                          **template_kwargs)
        if more is None:
            return "no_clean_tail"
        ids = [*tokens.prompt_ids, *tokens.completion_ids, *more]
        if forced:
            ids += self.tail.tokenizer.encode(forced, add_special_tokens=False)
        upstream = completion_args(args, len(ids), self.max_model_len)
        if isinstance(upstream, str):
            return upstream
        return ids, upstream, earlier, forced

    async def __call__(
        self, session: Session, messages: list[dict[str, Any]], tools: Any, args: dict[str, Any]
    ) -> ModelResponse | str:
        state = self._state(session)
        planned = self.plan(session, messages, tools, args)
        if isinstance(planned, str):
            state.counts[planned] += 1
            return planned
        ids, upstream, earlier, forced = planned
        try:
            completion = await session.client.complete(session.model, ids, sampling_args=upstream)
        except OverlongPromptError:
            raise  # the messages would be as long: the session ends the rollout as prompt_too_long
        except BadRequestError:
            # Refused as token ids: the messages go as a chat call, which answers the program with
            # the server's own words if the request is bad either way (e.g. the program's `stop`).
            state.counts["upstream_rejected"] += 1
            return "upstream_rejected"
        state.counts["token_in"] += 1
        reasoning = self.reasoning
        if reasoning is None:
            reasoning = bool((earlier.reply or {}).get("reasoning_content") or (earlier.reply or {}).get("reasoning"))
        parsed_tools = tools if args.get("tool_choice") != "none" else None
        return chat_response(completion, ids, parsed_tools, self.parse_tools, forced=forced, reasoning=reasoning)


def token_prompt_for(tokenizer: Any, **kwargs: Any) -> TokenIn:
    """The token-in hook for ``Session.token_prompt`` (see `TokenIn` for the options)."""
    return TokenIn(tokenizer, **kwargs)
