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
from verifiers.types import SamplingArgs

_PLAIN = (str, int, float, bool, type(None))


def to_plain(obj: Any, depth: int = 0) -> Any:
    """A response object as plain JSON-like data (dicts, lists, scalars).

    Pydantic models (the SDK's) go through ``model_dump`` so server extras such
    as vLLM's ``token_ids`` survive; other objects are read attribute by attribute,
    which is how a ``SimpleNamespace`` or a hand-written mock response looks.
    """
    if depth > 12 or isinstance(obj, _PLAIN):
        return obj
    if isinstance(obj, dict):
        return {k: to_plain(v, depth + 1) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v, depth + 1) for v in obj]
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        try:
            return to_plain(dump(), depth + 1)
        except Exception:  # a mock's model_dump may be a mock too
            pass
    attrs = getattr(obj, "__dict__", None)
    if isinstance(attrs, dict):
        return {k: to_plain(v, depth + 1) for k, v in attrs.items() if not k.startswith("_")}
    return obj


def _accepts(fn: Any, name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == name or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


class CreateMethodChatClient:
    """Calls ``client.chat.completions.create`` / ``client.completions.create`` as 0.1.x did.

    Sampling args are passed as keyword arguments unchanged (``extra_body`` included,
    so the SDK merges it as it always did). A synchronous ``create`` runs in a worker
    thread so it does not block the event loop; an async one is awaited. ``timeout``
    is passed when ``create`` takes it and is also enforced around the call.
    """

    def __init__(self, client: Any) -> None:
        self.client = client

    async def _call(self, create: Any, timeout: float | None, **kwargs: Any) -> Any:
        if timeout is not None and _accepts(create, "timeout"):
            kwargs["timeout"] = timeout
        if inspect.iscoroutinefunction(create):
            pending: Any = create(**kwargs)
        else:
            pending = asyncio.to_thread(create, **kwargs)
        try:
            result = await asyncio.wait_for(pending, timeout) if timeout is not None else await pending
            if inspect.isawaitable(result):  # a sync-looking callable that returns a coroutine
                result = await result
        except (asyncio.CancelledError, ModelError):
            raise
        except TimeoutError as exc:
            raise ModelTimeoutError(f"model call timed out after {timeout:g}s") from exc
        except Exception as exc:
            raise map_openai_error(exc) from exc
        return to_plain(result)

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
        kwargs.update({k: v for k, v in (sampling_args or {}).items() if v is not None})
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
        completions = getattr(self.client, "completions", None)
        if completions is None or not callable(getattr(completions, "create", None)):
            from verifiers.errors import ConfigError

            raise ConfigError(
                f"{type(self.client).__name__} has no completions.create: completion-mode "
                "environments (message_type='completion') need one"
            )
        kwargs: dict[str, Any] = {"model": model, "prompt": prompt}
        kwargs.update({k: v for k, v in (sampling_args or {}).items() if v is not None})
        data = await self._call(completions.create, timeout, **kwargs)
        return parse_completion_response(data)


def has_chat_create(client: Any) -> bool:
    """Whether ``client.chat.completions.create`` exists and is callable (0.1.x duck typing)."""
    chat = getattr(client, "chat", None)
    completions = getattr(chat, "completions", None)
    return callable(getattr(completions, "create", None))
