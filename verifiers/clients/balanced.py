"""One `ChatClient` over several replicas of the same model, and the one factory that builds it.

`make_chat_client` turns a `ChatTarget` (URL, model name, key) list into one client:
the own client of a single target, else a balancer over all of them. Two balancers:

- ``round_robin`` (`RoundRobinClient`, vf-eval's endpoint aliases): each request goes to the
  next replica; the cheapest way to use a few vLLM replicas without a load balancer.
- ``affinity`` (`AffinityClient`, vf-train's vLLM servers): sticky conversations and failover.

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

import itertools
import json
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from verifiers.clients.openai_client import ChatClient, as_chat_client, make_client
from verifiers.clients.response import ModelResponse
from verifiers.errors import ConfigError, ServerError
from verifiers.types import SamplingArgs

T = TypeVar("T")
Balance = Literal["round_robin", "affinity"]
BALANCES: tuple[Balance, ...] = ("round_robin", "affinity")


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


class RoundRobinClient:
    """A `ChatClient` spreading requests over several endpoints, one after another.

    Each request goes to the next endpoint and asks it for *that endpoint's* model name
    (replicas may register the same weights under different names). Retries happen
    inside each endpoint's client, so a failing replica is retried where it failed.
    """

    def __init__(self, clients: Sequence[ChatClient], models: Sequence[str]) -> None:
        if not clients or len(clients) != len(models):
            raise ConfigError("RoundRobinClient needs one model name per client, and at least one client")
        self.clients = list(clients)
        self.models = list(models)
        self._next = itertools.cycle(range(len(self.clients)))

    def _pick(self) -> tuple[ChatClient, str]:
        i = next(self._next)
        return self.clients[i], self.models[i]

    async def chat(
        self,
        model: str,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        sampling_args: SamplingArgs | None = None,
        timeout: float | None = None,
    ) -> ModelResponse:
        client, endpoint_model = self._pick()
        return await client.chat(
            endpoint_model, messages, tools=tools, sampling_args=sampling_args, timeout=timeout
        )

    async def complete(
        self,
        model: str,
        prompt: str,
        *,
        sampling_args: SamplingArgs | None = None,
        timeout: float | None = None,
    ) -> ModelResponse:
        client, endpoint_model = self._pick()
        return await client.complete(endpoint_model, prompt, sampling_args=sampling_args, timeout=timeout)

    async def release_loop_session(self) -> None:
        """Close every endpoint's connection pool of this event loop (called by the engine at the end)."""
        for c in self.clients:
            release = getattr(c, "release_loop_session", None)
            if release is not None:
                await release()

    async def close(self) -> None:
        for c in self.clients:
            close = getattr(c, "close", None)
            if close is not None:
                await close()


@dataclass(frozen=True)
class ChatTarget:
    """One replica: its OpenAI-compatible URL, the model name to ask it for, and its key.

    ``api_key=None`` reads ``OPENAI_API_KEY`` (or sends ``EMPTY``), as `make_client` does.
    """

    base_url: str
    model: str
    api_key: str | None = None


def make_chat_client(
    targets: Sequence[ChatTarget],
    *,
    balance: Balance = "round_robin",
    timeout: float = 600.0,
    max_retries: int = 3,
    headers: dict[str, str] | None = None,
) -> ChatClient:
    """One `ChatClient` for ``targets``: the target's own client, or a ``balance`` balancer over several.

    Each target gets a client of its own (`make_client`: retries happen there, where a request
    failed); the `AffinityClient` names its replicas by URL, the names `AffinityClient.retire` takes.
    """
    if balance not in BALANCES:
        raise ConfigError(f"unknown balance {balance!r}: use {' or '.join(repr(b) for b in BALANCES)}")
    if not targets:
        raise ConfigError("make_chat_client needs at least one target")
    clients = [
        as_chat_client(make_client(t.base_url, api_key=t.api_key, timeout=timeout, max_retries=max_retries,
                                   headers=headers))
        for t in targets
    ]
    if len(clients) == 1:
        return clients[0]
    models = [t.model for t in targets]
    if balance == "affinity":
        return AffinityClient(clients, models, names=[t.base_url for t in targets])
    return RoundRobinClient(clients, models)
