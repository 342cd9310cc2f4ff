"""AffinityClient: a conversation stays on one replica (prefix cache), new ones go to the least busy,
a dead replica's requests are answered by the others."""

from __future__ import annotations

import asyncio

import pytest

import verifiers as vf
from verifiers.clients.balanced import AffinityClient, conversation_key
from verifiers.errors import ConfigError, ServerError
from verifiers.testing import ScriptedClient


def test_conversation_key_is_the_prefix_up_to_the_first_user_message() -> None:
    sys = {"role": "system", "content": "s"}
    first = [sys, {"role": "user", "content": "q"}]
    later = [*first, {"role": "assistant", "content": "a"}, {"role": "user", "content": "more"}]
    assert conversation_key(first) == conversation_key(later)
    assert conversation_key(first) != conversation_key([sys, {"role": "user", "content": "other"}])


async def test_groups_stick_to_one_server_and_spread_across_servers() -> None:
    a, b = ScriptedClient(["a"], latency_s=0.01), ScriptedClient(["b"], latency_s=0.01)
    client = AffinityClient([a, b], ["m-a", "m-b"])
    env = vf.SingleTurnEnv(dataset=[{"question": f"q{i}"} for i in range(8)])
    out = await env.a_evaluate(client, "ignored", rollouts_per_example=4, max_concurrent=64)
    by_prompt: dict[str, set[str]] = {}
    for r in out.results:
        by_prompt.setdefault(r.prompt[-1]["content"], set()).add(r.completion[-1]["content"])
    assert all(len(s) == 1 for s in by_prompt.values())  # every sample of a group on one server
    assert {next(iter(s)) for s in by_prompt.values()} == {"a", "b"}  # both servers used
    assert {c.model for c in a.calls} == {"m-a"} and {c.model for c in b.calls} == {"m-b"}
    assert 8 <= len(a.calls) <= 24 and len(a.calls) + len(b.calls) == 32


async def test_multiturn_conversation_follows_its_server() -> None:
    class Two(vf.MultiTurnEnv):
        async def env_response(self, messages, state, **kwargs):
            return [{"role": "user", "content": "again"}]

    a, b = ScriptedClient(["a"]), ScriptedClient(["b"])
    client = AffinityClient([a, b], ["m", "m"])
    out = await Two(dataset=[{"question": "q"}], max_turns=3).a_evaluate(client, "m")
    contents = [m["content"] for m in out.results[0].completion if m["role"] == "assistant"]
    assert contents in (["a"] * 3, ["b"] * 3)


async def test_a_dead_server_fails_over_and_is_skipped() -> None:
    dead = ScriptedClient([ServerError("connection error: refused")])
    live = ScriptedClient(["ok"])
    client = AffinityClient([dead, live], ["m", "m"], names=["dead", "live"], cooldown_s=60)
    env = vf.SingleTurnEnv(dataset=[{"question": f"q{i}"} for i in range(6)])
    out = await env.a_evaluate(client, "m", rollouts_per_example=2, max_concurrent=1)
    assert all(r.error is None and r.completion[-1]["content"] == "ok" for r in out.results)
    assert len(dead.calls) == 1  # tried once, then skipped while it cools down
    assert client.failovers == 1 and client.requests == [1, 12]  # 12 rollouts, the first retried


async def test_every_server_failing_is_one_error_naming_them_all() -> None:
    client = AffinityClient([ScriptedClient([ServerError("boom1")]), ScriptedClient([ServerError("boom2")])],
                            ["m", "m"], names=["s1", "s2"])
    with pytest.raises(ServerError, match="every server failed: s1: boom1; s2: boom2"):
        await client.chat("m", [{"role": "user", "content": "q"}])


async def test_retired_server_gets_nothing() -> None:
    a, b = ScriptedClient(["a"]), ScriptedClient(["b"])
    client = AffinityClient([a, b], ["m", "m"], names=["A", "B"])
    client.retire("A")
    await asyncio.gather(*[client.chat("m", [{"role": "user", "content": f"q{i}"}]) for i in range(5)])
    assert len(a.calls) == 0 and len(b.calls) == 5


def test_needs_one_model_per_client() -> None:
    with pytest.raises(ConfigError):
        AffinityClient([ScriptedClient(["x"])], ["a", "b"])


async def test_close_closes_every_replica() -> None:
    closed: list[str] = []

    class Closing(ScriptedClient):
        def __init__(self, name: str) -> None:
            super().__init__(["x"])
            self.name = name

        async def close(self) -> None:
            closed.append(self.name)

    await AffinityClient([Closing("a"), Closing("b")], ["m", "m"]).close()
    assert closed == ["a", "b"]
