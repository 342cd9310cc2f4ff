"""One `ChatClient` over several replicas of the same model: sticky conversations, failover.

Why sticky: the G samples of a GRPO group share their prompt, and every later turn of a
multi-turn episode extends it. Sending all of them to the server that saw the prompt first
lets its prefix cache compute that prompt once. A conversation is identified by its messages
up to and including the first user message (the same for every sample and every turn of a
group); new conversations go to the live server with the fewest requests in flight.

Why failover: when a replica dies, its requests are retried on the others (after the
per-server client's own retries gave up with a `ServerError`) and the dead one is skipped
for ``cooldown_s``; only when every server fails does the request fail.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from verifiers.clients.openai_client import ChatClient
from verifiers.clients.response import ModelResponse
from verifiers.errors import ConfigError, ServerError
from verifiers.types import SamplingArgs

T = TypeVar("T")


def conversation_key(prompt: list[dict[str, Any]] | str) -> str:
    """Messages up to and including the first user message (a text prompt: its first 2,000 chars)."""
    if isinstance(prompt, str):
        return prompt[:2000]
    head: list[Any] = []
    for m in prompt:
        head.append(m)
        if isinstance(m, dict) and m.get("role") == "user":
            break
    return json.dumps(head, sort_keys=True, default=str)


class AffinityClient:
    """A `ChatClient` spreading conversations over replicas (see module doc)."""

    def __init__(self, clients: Sequence[ChatClient], models: Sequence[str], *, names: Sequence[str] | None = None,
                 cooldown_s: float = 30.0, max_keys: int = 100_000) -> None:
        if not clients or len(clients) != len(models):
            raise ConfigError("AffinityClient needs one model name per client, and at least one client")
        self.clients = list(clients)
        self.models = list(models)
        self.names = list(names) if names is not None else [f"server {i}" for i in range(len(clients))]
        self.cooldown_s = cooldown_s
        self.max_keys = max_keys
        self.in_flight = [0] * len(clients)
        self.down_until = [0.0] * len(clients)
        self.requests = [0] * len(clients)
        self.failovers = 0
        self._home: OrderedDict[str, int] = OrderedDict()

    async def close(self) -> None:
        """Close every replica's client (their connection pools belong to this event loop)."""
        for c in self.clients:
            close = getattr(c, "close", None)
            if close is not None:
                await close()

    def retire(self, name: str) -> None:
        """Never send to ``name`` again (the trainer found it down); its conversations move on their next turn."""
        for i, n in enumerate(self.names):
            if n == name:
                self.down_until[i] = float("inf")

    def _live(self, i: int) -> bool:
        return time.monotonic() >= self.down_until[i]

    def _order(self, key: str) -> list[int]:
        """Servers to try, best first: this conversation's server if it is live, else the least busy."""
        n = len(self.clients)
        home = self._home.get(key)
        if home is None or not self._live(home):
            live = [i for i in range(n) if self._live(i)] or list(range(n))
            home = min(live, key=lambda i: (self.in_flight[i], i))
            self._home[key] = home
            if len(self._home) > self.max_keys:
                self._home.popitem(last=False)
        else:
            self._home.move_to_end(key)
        rest = sorted((i for i in range(n) if i != home), key=lambda i: (not self._live(i), self.in_flight[i], i))
        return [home, *rest]

    async def _call(self, key: str, fn: Callable[[ChatClient, str], Awaitable[T]]) -> T:
        errors: list[str] = []
        order = self._order(key)
        for attempt, i in enumerate(order):
            self.in_flight[i] += 1
            self.requests[i] += 1
            try:
                result = await fn(self.clients[i], self.models[i])
            except ServerError as exc:
                self.down_until[i] = time.monotonic() + self.cooldown_s
                errors.append(f"{self.names[i]}: {exc}")
                if attempt + 1 < len(order):
                    self.failovers += 1
                continue
            finally:
                self.in_flight[i] -= 1
            if i != order[0]:
                self._home[key] = i  # the conversation moved; later turns follow it
            return result
        raise ServerError("every server failed: " + "; ".join(errors))

    async def chat(
        self,
        model: str,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        sampling_args: SamplingArgs | None = None,
        timeout: float | None = None,
    ) -> ModelResponse:
        return await self._call(conversation_key(messages), lambda c, m: c.chat(
            m, messages, tools=tools, sampling_args=sampling_args, timeout=timeout))

    async def complete(
        self,
        model: str,
        prompt: str,
        *,
        sampling_args: SamplingArgs | None = None,
        timeout: float | None = None,
    ) -> ModelResponse:
        return await self._call(conversation_key(prompt), lambda c, m: c.complete(
            m, prompt, sampling_args=sampling_args, timeout=timeout))
