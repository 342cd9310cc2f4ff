"""Cancellation (Ctrl-C) and token-level data returned by the server."""

from __future__ import annotations

import asyncio
import time

import pytest

import verifiers as vf
from verifiers.testing import ScriptedReply, ScriptedServer, ServerScript

ROWS = [{"question": f"q{i}", "answer": f"q{i}"} for i in range(6)]


class Tracked(vf.SingleTurnEnv):
    def __init__(self, cleanup_awaits: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.cleanup_awaits = cleanup_awaits
        self.started: list[int] = []
        self.cleanup_called: list[int] = []
        self.cleaned: list[int] = []

    async def setup_state(self, state, **kwargs):
        self.started.append(state["example_id"])
        return state

    async def cleanup_state(self, state):
        self.cleanup_called.append(state["example_id"])
        if self.cleanup_awaits:
            await asyncio.sleep(0.01)  # e.g. deleting a sandbox over HTTP
        self.cleaned.append(state["example_id"])


@pytest.mark.timeout(20)
async def test_cancellation_propagates_and_cleans_up(server: ScriptedServer, client) -> None:
    server.set_script(ServerScript(latency_s=5.0))
    env = Tracked(dataset=ROWS)
    task = asyncio.create_task(env.a_evaluate(client, "m", max_concurrent=4))
    await asyncio.sleep(0.3)
    t0 = time.perf_counter()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.perf_counter() - t0 < 2
    assert len(env.started) == 4  # the semaphore held back the rest
    assert sorted(env.cleanup_called) == sorted(env.started)
    assert sorted(env.cleaned) == sorted(env.started)


@pytest.mark.timeout(20)
async def test_cancellation_lets_async_cleanup_finish(server: ScriptedServer, client) -> None:
    server.set_script(ServerScript(latency_s=5.0))
    env = Tracked(dataset=ROWS, cleanup_awaits=True)
    task = asyncio.create_task(env.a_evaluate(client, "m", max_concurrent=4))
    await asyncio.sleep(0.3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(env.started) == 4
    assert sorted(env.cleanup_called) == sorted(env.started)
    assert sorted(env.cleaned) == sorted(env.started)  # every cleanup ran to completion


@pytest.mark.timeout(20)
async def test_cancellation_during_multiturn(server: ScriptedServer, client) -> None:
    server.set_script(
        ServerScript(
            replies=[ScriptedReply(turn=0, content="first"), ScriptedReply(content="slow", latency_s=5)]
        )
    )
    cleaned: list[int] = []

    class Env(vf.MultiTurnEnv):
        async def env_response(self, messages, state, **kwargs):
            return [{"role": "user", "content": "go on"}]

        async def cleanup_state(self, state):
            cleaned.append(state["turn"])

    env = Env(dataset=ROWS[:3], max_turns=5)
    task = asyncio.create_task(env.a_evaluate(client, "m"))
    await asyncio.sleep(0.3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned == [1, 1, 1]  # each was cancelled inside its second model call


# -- tokens ------------------------------------------------------------------------------

TOKEN_ARGS = {"logprobs": True, "extra_body": {"return_token_ids": True}}


async def test_token_data_single_turn(server: ScriptedServer, client) -> None:
    env = vf.SingleTurnEnv(dataset=ROWS[:2])
    out = await env.a_evaluate(client, "m", sampling_args=TOKEN_ARGS)
    body = server.requests[-1]
    assert body["return_token_ids"] is True and body["logprobs"] is True
    for r in out.results:
        assert len(r.tokens) == 1
        t = r.tokens[0]
        text = r.completion[-1]["content"]
        assert t.completion_ids == [ord(c) for c in text]
        assert len(t.completion_logprobs) == len(text)
        assert all(lp < 0 for lp in t.completion_logprobs)
        assert "".join(map(chr, t.prompt_ids)).endswith("<|assistant|>")
        assert t.finish_reason == "stop"
    # Serialised with the result.
    assert '"prompt_ids"' in out.results[0].model_dump_json()


async def test_no_token_data_unless_requested(server: ScriptedServer, client) -> None:
    env = vf.SingleTurnEnv(dataset=ROWS[:1])
    out = await env.a_evaluate(client, "m")
    assert out.results[0].tokens == []


async def test_two_turn_prompt_ids_extend_previous_turn(server: ScriptedServer, client) -> None:
    class TwoTurn(vf.MultiTurnEnv):
        async def env_response(self, messages, state, **kwargs):
            return [{"role": "user", "content": "feedback"}]

    server.set_script(ServerScript(replies=[ScriptedReply(content="turn-{turn}")]))
    env = TwoTurn(dataset=ROWS[:2], max_turns=2)
    out = await env.a_evaluate(client, "m", sampling_args=TOKEN_ARGS)
    for r in out.results:
        assert len(r.tokens) == 2  # one per model call
        first, second = r.tokens
        for t in r.tokens:
            assert t.prompt_ids and t.completion_ids
            assert len(t.completion_logprobs) == len(t.completion_ids)
        prefix = first.prompt_ids + first.completion_ids
        assert second.prompt_ids[: len(prefix)] == prefix
        assert len(second.prompt_ids) > len(prefix)
        # One training sequence with the environment's tokens masked out.
        seq = r.token_sequence()
        assert seq.prefix_consistent
        assert seq.prompt_ids == first.prompt_ids
        assert sum(seq.completion_mask) == len(first.completion_ids) + len(second.completion_ids)
        assert len(seq.completion_ids) == len(seq.completion_mask) == len(seq.completion_logprobs)
        assert seq.completion_ids[-len(second.completion_ids) :] == second.completion_ids


async def test_tool_call_turn_tokens_are_prefix_consistent(server: ScriptedServer, client) -> None:
    from verifiers.testing import ScriptedToolCall

    def echo(text: str) -> str:
        """Echo.

        Args:
            text: the text
        """
        return text

    server.set_script(
        ServerScript(
            replies=[
                ScriptedReply(turn=0, tool_calls=[ScriptedToolCall(name="echo", arguments='{"text": "hi"}')]),
                ScriptedReply(content="done"),
            ]
        )
    )
    env = vf.ToolEnv(dataset=ROWS[:1], tools=[echo])
    out = await env.a_evaluate(client, "m", sampling_args=TOKEN_ARGS)
    r = out.results[0]
    assert len(r.tokens) == 2
    assert r.token_sequence().prefix_consistent


async def test_completion_mode_tokens(server: ScriptedServer, client) -> None:
    env = vf.SingleTurnEnv(dataset=[{"question": "abc"}], message_type="completion")
    out = await env.a_evaluate(
        client, "m", sampling_args={"logprobs": 1, "extra_body": {"return_token_ids": True}}
    )
    t = out.results[0].tokens[0]
    assert t.prompt_ids == [ord(c) for c in "abc"]
    assert t.completion_ids == [ord(c) for c in out.completion[0]]
    assert len(t.completion_logprobs) == len(t.completion_ids)
