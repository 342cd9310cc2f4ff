"""A model response reduced to what environments and trainers need.

Parsed straight from the server's JSON (not from the openai SDK's pydantic
objects): it is cheaper on the hot path and keeps vLLM's extra fields
(``prompt_token_ids``, per-choice ``token_ids``) that the SDK models hide.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verifiers.errors import EmptyResponseError
from verifiers.types import Message, TurnTokens, Usage


@dataclass(slots=True)
class ModelResponse:
    """One choice of a chat or completion response."""

    content: str | None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    tokens: TurnTokens | None = None
    raw: dict[str, Any] | None = None

    @property
    def is_truncated(self) -> bool:
        return self.finish_reason == "length"

    def to_message(self) -> Message:
        """The assistant message to append to the transcript (plain dict, OpenAI shape)."""
        msg: Message = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            msg["tool_calls"] = self.tool_calls
        return msg


def _usage(data: dict[str, Any]) -> Usage:
    u = data.get("usage") or {}
    return Usage(prompt_tokens=u.get("prompt_tokens") or 0, completion_tokens=u.get("completion_tokens") or 0)


def _chat_logprobs(choice: dict[str, Any]) -> list[float]:
    lp = choice.get("logprobs")
    if not lp:
        return []
    content = lp.get("content") or []
    return [float(t.get("logprob", 0.0)) for t in content]


def _tokens(data: dict[str, Any], choice: dict[str, Any], logprobs: list[float]) -> TurnTokens | None:
    prompt_ids = data.get("prompt_token_ids") or choice.get("prompt_token_ids")
    completion_ids = choice.get("token_ids")
    if prompt_ids is None or completion_ids is None:
        return None
    return TurnTokens(
        prompt_ids=list(prompt_ids),
        completion_ids=list(completion_ids),
        completion_logprobs=logprobs,
        finish_reason=choice.get("finish_reason"),
    )


def _first_choice(data: dict[str, Any]) -> dict[str, Any]:
    choices = data.get("choices") if isinstance(data, dict) else None
    if not choices:
        raise EmptyResponseError(f"server returned no choices: {str(data)[:300]}")
    return choices[0]


def _normalise_tool_calls(raw: list[Any] | None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, tc in enumerate(raw or []):
        fn = tc.get("function") or {}
        out.append(
            {
                "id": tc.get("id") or f"call_{i}",
                "type": "function",
                "function": {"name": fn.get("name", ""), "arguments": fn.get("arguments") or ""},
            }
        )
    return out


def parse_chat_response(data: dict[str, Any]) -> ModelResponse:
    choice = _first_choice(data)
    message = choice.get("message") or {}
    logprobs = _chat_logprobs(choice)
    return ModelResponse(
        content=message.get("content"),
        tool_calls=_normalise_tool_calls(message.get("tool_calls")),
        finish_reason=choice.get("finish_reason"),
        usage=_usage(data),
        tokens=_tokens(data, choice, logprobs),
        raw=data,
    )


def parse_completion_response(data: dict[str, Any]) -> ModelResponse:
    choice = _first_choice(data)
    lp = choice.get("logprobs") or {}
    logprobs = [float(x) for x in (lp.get("token_logprobs") or []) if x is not None]
    return ModelResponse(
        content=choice.get("text") or "",
        finish_reason=choice.get("finish_reason"),
        usage=_usage(data),
        tokens=_tokens(data, choice, logprobs),
        raw=data,
    )


# -- 0.1.x: responses in ``state["responses"]`` that also read like the openai SDK's objects ----
# 0.1.x kept the SDK's ``ChatCompletion``/``Completion`` objects there, and environments and
# rubrics read ``state["responses"][-1].choices[0].message.content`` or
# ``.choices[0].finish_reason``. `ResponseView` wraps our lean `ModelResponse` (built straight
# from the JSON) and builds the SDK object from the raw JSON only when one of its attributes is
# asked for, so the hot path pays nothing for this.


class ResponseView:
    """A `ModelResponse` whose unknown attributes (``choices``, ``id``, ``model``...) come from the SDK object."""

    __slots__ = ("_sdk", "response")

    def __init__(self, response: Any) -> None:
        self.response = response
        self._sdk: Any = None

    def _sdk_object(self) -> Any:
        if self._sdk is None:
            raw = getattr(self.response, "raw", None) or {}
            from openai.types.chat import ChatCompletion
            from openai.types.completion import Completion

            choices = raw.get("choices") or []
            is_chat = bool(choices) and "message" in choices[0]
            cls = ChatCompletion if is_chat else Completion
            self._sdk = cls.model_construct(**raw) if not raw else _validate(cls, raw)
        return self._sdk

    @property
    def sdk(self) -> Any:
        """The openai SDK object (``ChatCompletion`` or ``Completion``) for this response."""
        return self._sdk_object()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return getattr(self.response, name)
        except AttributeError:
            return getattr(self._sdk_object(), name)

    def __repr__(self) -> str:
        return f"ResponseView({self.response!r})"


def _validate(cls: Any, raw: dict[str, Any]) -> Any:
    """Validate leniently: servers add fields (vLLM token ids) and omit some the SDK wants."""
    data = {"id": "", "created": 0, "model": "", "object": "chat.completion", **raw}
    if cls.__name__ == "Completion":
        data["object"] = "text_completion"
    try:
        return cls.model_validate(data)
    except Exception:
        return cls.model_construct(**data)


OVERLONG_PROMPT_ID = "overlong-prompt"


def overlong_prompt_response(message_type: str) -> Any:
    """0.1.x's placeholder for a prompt over the context length: an SDK ``ChatCompletion`` /
    ``Completion`` with id ``"overlong-prompt"``, text "Prompt too long." and
    ``finish_reason="length"``. 0.1.x rollout loops (and environments copied from them)
    check ``response.id == "overlong-prompt"`` to end the episode."""
    from openai.types.chat import ChatCompletion, ChatCompletionMessage
    from openai.types.chat.chat_completion import Choice
    from openai.types.completion import Completion
    from openai.types.completion_choice import CompletionChoice

    if message_type == "chat":
        message = ChatCompletionMessage(role="assistant", content="Prompt too long.")
        choice = Choice(index=0, message=message, finish_reason="length")
        return ChatCompletion(id=OVERLONG_PROMPT_ID, created=0, model="", object="chat.completion", choices=[choice])
    if message_type == "completion":
        text_choice = CompletionChoice(index=0, text="Prompt too long.", finish_reason="length")
        return Completion(id=OVERLONG_PROMPT_ID, created=0, model="", object="text_completion", choices=[text_choice])
    raise ValueError(f"Invalid message type: {message_type}")
