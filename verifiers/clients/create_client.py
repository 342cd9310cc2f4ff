"""`ChatClient` over any object with ``chat.completions.create`` (0.1.x accepted those).

verifiers 0.1.x called ``client.chat.completions.create(model=..., messages=...,
**sampling_args)`` (and ``client.completions.create(...)`` in completion mode) on
whatever it was given, so users passed wrappers (rate limiters, tracing, caching),
test mocks and sync ``openai.OpenAI`` clients. This adapter keeps that contract:
the user's own ``create`` is called, exactly as 0.1.x called it, and its return
value (an SDK pydantic object, a dict, or any object with ``choices``) is turned
into the JSON shape our parser reads. Only the plain SDK clients take the fast
paths in `as_chat_client`.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from verifiers.clients.errors import map_openai_error
from verifiers.clients.response import ModelResponse, parse_chat_response, parse_completion_response
from verifiers.errors import ModelError, ModelTimeoutError
from verifiers.types import Messages, MessageType, SamplingArgs

_PLAIN = (str, int, float, bool, type(None))

# The fields of an OpenAI chat / text completion that our parser reads, for objects that are
# neither dicts nor pydantic models: {name: nested fields, or None for a plain value}; a
# one-element list means "a list of these". vLLM's token id fields are included.
_FUNCTION = {"name": None, "arguments": None}
_TOOL_CALL = {"id": None, "type": None, "function": _FUNCTION}
_LOGPROB = {"token": None, "logprob": None}
_RESPONSE_FIELDS: dict[str, Any] = {
    "id": None,
    "model": None,
    "object": None,
    "created": None,
    "prompt_token_ids": None,
    "usage": {"prompt_tokens": None, "completion_tokens": None, "total_tokens": None},
    "choices": [
        {
            "index": None,
            "finish_reason": None,
            "text": None,
            "token_ids": None,
            "prompt_token_ids": None,
            "message": {"role": None, "content": None, "reasoning_content": None, "tool_calls": [_TOOL_CALL]},
            "logprobs": {"content": [_LOGPROB], "tokens": None, "token_logprobs": None},
        }
    ],
}


def _is_mock(obj: Any) -> bool:
    """unittest.mock objects answer every attribute with another mock: read only what was set."""
    return any(c.__module__ == "unittest.mock" for c in type(obj).__mro__)


def _read_fields(obj: Any, fields: Any) -> Any:
    """``obj`` read attribute by attribute (or key by key) along ``fields``, as 0.1.x read
    ``response.choices[0].message.content``. A mock's unset attribute (another mock) and a
    missing one are left out; a value that is not plain JSON where one is expected too."""
    if fields is None:
        if isinstance(obj, _PLAIN):
            return obj
        if isinstance(obj, (list, tuple)) and all(isinstance(v, _PLAIN) for v in obj):
            return list(obj)
        return _MISSING
    if isinstance(fields, list):
        if _is_mock(obj) and hasattr(type(obj), "__getitem__"):  # ``resp.choices[0].message.content = ...``
            obj = [obj[0]]
        if not isinstance(obj, (list, tuple)):
            return _MISSING
        return [v for v in (_read_fields(item, fields[0]) for item in obj) if v is not _MISSING]
    if obj is None or (_is_mock(obj) and not _mock_has_fields(obj, fields)):
        return None if obj is None else _MISSING
    out: dict[str, Any] = {}
    for name, sub in fields.items():
        value = obj.get(name, _MISSING) if isinstance(obj, dict) else _attribute(obj, name)
        if value is _MISSING:
            continue
        value = _read_fields(value, sub) if value is not None else None
        if value is not _MISSING:
            out[name] = value
    return out


_MISSING: Any = object()


def _attribute(obj: Any, name: str) -> Any:
    if _is_mock(obj):
        # set attributes live in the instance dict (plain values) or as named children (mocks)
        if name in vars(obj):
            return vars(obj)[name]
        children = vars(obj).get("_mock_children", {})
        return children.get(name, _MISSING)
    return getattr(obj, name, _MISSING)


def _mock_has_fields(obj: Any, fields: dict[str, Any]) -> bool:
    return any(_attribute(obj, name) is not _MISSING for name in fields)


def to_plain(obj: Any) -> Any:
    """A response object as plain JSON-like data (dicts, lists, scalars).

    Dicts are used as they are and pydantic models (the SDK's) go through
    ``model_dump``, so server extras such as vLLM's ``token_ids`` survive. Anything
    else (a ``SimpleNamespace``, a hand-written class, a ``MagicMock`` whose
    ``choices[0].message.content`` a test set) is read field by field along the
    OpenAI response shape, the way 0.1.x read it by attribute access.
    """
    if isinstance(obj, dict):
        return obj
    if not _is_mock(obj):
        dump = getattr(obj, "model_dump", None)
        if callable(dump):
            dumped = dump()
            if isinstance(dumped, dict):
                return dumped
    return _read_fields(obj, _RESPONSE_FIELDS)


def as_model_response(obj: Any, completion_mode: bool) -> ModelResponse:
    """Whatever an overridden ``get_model_response`` returned, as the `ModelResponse` the loop reads:
    ours (or a `ResponseView` of it) as is; an SDK object, a dict or a mock through `to_plain`."""
    from verifiers.clients.response import ResponseView
    from verifiers.errors import EmptyResponseError

    if isinstance(obj, ResponseView):
        obj = obj.response
    if isinstance(obj, ModelResponse):
        return obj
    if obj is None:
        raise EmptyResponseError("get_model_response returned None")
    data = to_plain(obj)
    if not isinstance(data, dict):
        raise EmptyResponseError(f"get_model_response returned {type(obj).__name__}, not a response")
    return parse_completion_response(data) if completion_mode else parse_chat_response(data)


def v01_request_args(prompt: Messages, sampling_args: SamplingArgs | None, message_type: MessageType) -> SamplingArgs:
    """Sampling args as 0.1.5's ``get_model_response`` sent them.

    ``max_tokens`` becomes ``max_completion_tokens`` in chat mode, ``None`` values are
    dropped, and a chat prompt with ``input_audio`` parts asks for text output
    (``modalities=["text"]``) unless the caller chose modalities. The caller's dict is
    not modified (0.1.5 popped keys from it).
    """
    args = dict(sampling_args or {})
    if "max_tokens" in args:
        max_tokens = args.pop("max_tokens")
        if max_tokens is not None:
            args["max_completion_tokens" if message_type == "chat" else "max_tokens"] = max_tokens
    args = {k: v for k, v in args.items() if v is not None}
    if message_type == "chat" and "modalities" not in args and _has_audio(prompt):
        args["modalities"] = ["text"]
    return args


def _has_audio(prompt: Messages) -> bool:
    if not isinstance(prompt, list):
        return False
    for message in prompt:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list) and any(
            isinstance(part, dict) and str(part.get("type", "")).startswith("input_audio") for part in content
        ):
            return True
    return False


def _accepts(fn: Any, name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == name or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


class CreateMethodChatClient:
    """Calls ``client.chat.completions.create`` / ``client.completions.create`` as 0.1.x did.

    Sampling args are passed as keyword arguments the way 0.1.5's ``get_model_response``
    passed them (`v01_request_args`; ``extra_body`` included, so the SDK merges it as it
    always did). A synchronous ``create`` runs in a worker
    thread so it does not block the event loop; an async one is awaited. ``timeout``
    is passed when ``create`` takes it and is also enforced around the call.
    """

    def __init__(self, client: Any) -> None:
        self.client = client

    @staticmethod
    async def _invoke(create: Any, timeout: float | None, **kwargs: Any) -> Any:
        """``create(**kwargs)``, awaited or run in a worker thread; its return value and exceptions as they are."""
        if timeout is not None and _accepts(create, "timeout"):
            kwargs["timeout"] = timeout
        if inspect.iscoroutinefunction(create):
            pending: Any = create(**kwargs)
        else:
            pending = asyncio.to_thread(create, **kwargs)
        result = await asyncio.wait_for(pending, timeout) if timeout is not None else await pending
        if inspect.isawaitable(result):  # a sync-looking callable that returns a coroutine
            result = await result
        return result

    async def _call(self, create: Any, timeout: float | None, **kwargs: Any) -> Any:
        try:
            result = await self._invoke(create, timeout, **kwargs)
        except (asyncio.CancelledError, ModelError):
            raise
        except TimeoutError as exc:
            raise ModelTimeoutError(f"model call timed out after {timeout:g}s") from exc
        except Exception as exc:
            raise map_openai_error(exc) from exc
        return to_plain(result)

    def _completions_create(self) -> Any:
        completions = getattr(self.client, "completions", None)
        if completions is None or not callable(getattr(completions, "create", None)):
            from verifiers.errors import ConfigError

            raise ConfigError(
                f"{type(self.client).__name__} has no completions.create: completion-mode "
                "environments (message_type='completion') need one"
            )
        return completions.create

    async def create(
        self, model: str, prompt: Messages, *, tools: list[dict[str, Any]] | None = None,
        sampling_args: SamplingArgs | None = None,
    ) -> Any:
        """The client's own ``create``, called as 0.1.5's ``get_model_response`` called it, with what it
        returned handed back unread and what it raised re-raised as it is (0.1.5 did both; 0.1.x tests
        give a mock ``create`` that returns a placeholder and inspect only the arguments it got)."""
        if isinstance(prompt, str):
            kwargs: dict[str, Any] = {"model": model, "prompt": prompt}
            kwargs.update(v01_request_args(prompt, sampling_args, "completion"))
            return await self._invoke(self._completions_create(), None, **kwargs)
        kwargs = {"model": model, "messages": list(prompt)}
        if tools:
            kwargs["tools"] = tools
        kwargs.update(v01_request_args(prompt, sampling_args, "chat"))
        return await self._invoke(self.client.chat.completions.create, None, **kwargs)

    async def chat(
        self,
        model: str,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        sampling_args: SamplingArgs | None = None,
        timeout: float | None = None,
    ) -> ModelResponse:
        kwargs: dict[str, Any] = {"model": model, "messages": list(messages)}  # a snapshot: wrappers may keep it
        if tools:
            kwargs["tools"] = tools
        kwargs.update(v01_request_args(messages, sampling_args, "chat"))
        data = await self._call(self.client.chat.completions.create, timeout, **kwargs)
        return parse_chat_response(data)

    async def complete(
        self,
        model: str,
        prompt: str,
        *,
        sampling_args: SamplingArgs | None = None,
        timeout: float | None = None,
    ) -> ModelResponse:
        create = self._completions_create()
        kwargs: dict[str, Any] = {"model": model, "prompt": prompt}
        kwargs.update(v01_request_args(prompt, sampling_args, "completion"))
        data = await self._call(create, timeout, **kwargs)
        return parse_completion_response(data)


def has_chat_create(client: Any) -> bool:
    """Whether ``client.chat.completions.create`` exists and is callable (0.1.x duck typing)."""
    chat = getattr(client, "chat", None)
    completions = getattr(chat, "completions", None)
    return callable(getattr(completions, "create", None))
