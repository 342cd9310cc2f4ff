"""MultiTurnEnv: the turn loop, hook styles, stop reasons, state visible to the rubric."""

from __future__ import annotations

from typing import Any

import pytest

import verifiers as vf
from verifiers.testing import ScriptedReply, ScriptedServer, ServerScript


class TupleEnv(vf.MultiTurnEnv):
    """0.1.x style: async hooks, env_response returns (messages, state)."""

    async def setup_state(self, state, **kwargs):
        state["secret"] = "s3cr3t"
        state["seen_turns"] = []
        return state

    async def is_completed(self, messages, state, **kwargs):
        return state.get("done", False)

    async def env_response(self, messages, state, **kwargs):
        state["seen_turns"].append(state["turn"])
        if state["turn"] >= 2:
            state["done"] = True
            return [{"role": "user", "content": "final feedback: well done"}], state
        return [{"role": "user", "content": f"continue {state['turn']}"}], state


class ListEnv(vf.MultiTurnEnv):
    """Later style: sync hooks, env_response returns just a list; never completes by itself."""

    def setup_state(self, state, **kwargs):
        state["counter"] = 100
        return state

    def is_completed(self, messages, state, **kwargs):
        return False

    def env_response(self, messages, state, **kwargs):
        state["counter"] += 1
        return [{"role": "user", "content": f"more {state['counter']}"}]


class DictEnv(vf.MultiTurnEnv):
    """env_response may return a single message dict; setup_state may return a new dict."""

    def setup_state(self, state, **kwargs):
        return {"added_by_new_dict": True}

    async def env_response(self, messages, state, **kwargs):
        return {"role": "user", "content": "one message"}


DATA = [{"question": "start", "answer": "a"}]


async def test_tuple_env_response_and_final_env_message(server: ScriptedServer, client) -> None:
    server.set_script(ServerScript(replies=[ScriptedReply(content="model turn {turn}")]))
    seen: dict[str, Any] = {}

    def saw_final(completion, state) -> float:
        seen["completion"] = completion
        seen["secret"] = state["secret"]
        seen["turn"] = state["turn"]
        return 1.0 if "final feedback" in completion[-1]["content"] else 0.0

    env = TupleEnv(dataset=DATA, rubric=vf.Rubric(funcs=[saw_final]), max_turns=10)
    out = await env.a_evaluate(client, "m")
    r = out.results[0]
    assert r.error is None
    assert r.stop_reason == "completed"
    assert r.reward == 1.0
    # The final environment message is the last message of the completion, seen by the rubric.
    assert r.completion[-1] == {"role": "user", "content": "final feedback: well done"}
    assert seen["completion"] == r.completion
    assert seen["secret"] == "s3cr3t"
    assert seen["turn"] == 2
    assert r.turns == 2
    assert r.state["seen_turns"] == [1, 2]
    # Completion excludes the prompt and alternates model / environment.
    assert [m["role"] for m in r.completion] == ["assistant", "user", "assistant", "user"]
    assert r.completion[0]["content"] == "model turn 0"
    assert r.completion[2]["content"] == "model turn 1"
    assert r.prompt == [{"role": "user", "content": "start"}]
    assert all(m["content"] != "start" for m in r.completion)
    # The server saw the growing transcript.
    assert [len(b["messages"]) for b in server.requests] == [1, 3]


async def test_list_env_response_sync_hooks_max_turns(server: ScriptedServer, client) -> None:
    seen_states = []

    def counter_metric(state) -> float:
        seen_states.append(state)
        return float(state["counter"])

    env = ListEnv(dataset=DATA, rubric=vf.Rubric(funcs=[counter_metric], weights=[0.0]), max_turns=3)
    out = await env.a_evaluate(client, "m")
    r = out.results[0]
    assert r.error is None
    assert r.stop_reason == "max_turns"
    assert r.turns == 3 == r.state["turn"]
    assert server.n_requests == 3
    # As in 0.1.x the environment does not answer the last allowed turn: two env responses.
    assert r.state["counter"] == 102
    assert r.metrics["counter_metric"] == 102.0
    assert r.reward == 0.0
    assert seen_states[0] is r.state
    assert [m["role"] for m in r.completion] == ["assistant", "user"] * 2 + ["assistant"]
    assert r.completion[1]["content"] == "more 101"
    assert r.completion[-2]["content"] == "more 102"


async def test_single_message_dict_and_new_state_dict(server: ScriptedServer, client) -> None:
    env = DictEnv(dataset=DATA, max_turns=2)
    out = await env.a_evaluate(client, "m")
    r = out.results[0]
    assert r.error is None
    assert r.state["added_by_new_dict"] is True
    assert r.completion[1] == {"role": "user", "content": "one message"}
    assert r.stop_reason == "max_turns"
    assert r.turns == 2


async def test_state_turn_counts_model_calls(server: ScriptedServer, client) -> None:
    turns_seen = []

    class Env(vf.MultiTurnEnv):
        async def is_completed(self, messages, state, **kwargs):
            turns_seen.append(state["turn"])
            return state["turn"] >= 3

        async def env_response(self, messages, state, **kwargs):
            return [{"role": "user", "content": "again"}]

    env = Env(dataset=DATA, max_turns=0)  # max_turns <= 0: no turn limit
    out = await env.a_evaluate(client, "m")
    assert out.results[0].turns == 3
    assert out.stop_reason == ["completed"]
    assert max(turns_seen) == 3
    assert server.n_requests == 3


async def test_env_response_bad_return_is_env_error(server: ScriptedServer, client) -> None:
    class Bad(vf.MultiTurnEnv):
        async def env_response(self, messages, state, **kwargs):
            return 42

    env = Bad(dataset=DATA * 2, max_turns=3)
    out = await env.a_evaluate(client, "m")
    for r in out.results:
        assert r.stop_reason == "error"
        assert r.error is not None and r.error.type == "EnvError"
        assert r.error.where == "env"
        assert "list of message dicts" in r.error.message
        # What happened before the failure is kept.
        assert r.completion[0]["role"] == "assistant"


async def test_cleanup_state_called_once_per_rollout(server: ScriptedServer, client) -> None:
    cleaned = []

    class Env(ListEnv):
        async def cleanup_state(self, state):
            cleaned.append(state["example_id"])

    env = Env(dataset=[{"question": "a"}, {"question": "b"}], max_turns=2)
    await env.a_evaluate(client, "m", rollouts_per_example=2)
    assert sorted(cleaned) == [0, 0, 1, 1]


async def test_failing_cleanup_does_not_hide_result(server: ScriptedServer, client) -> None:
    class Env(ListEnv):
        async def cleanup_state(self, state):
            raise RuntimeError("cleanup broke")

    env = Env(dataset=DATA, max_turns=1)
    out = await env.a_evaluate(client, "m")
    r = out.results[0]
    assert r.error is None
    assert r.stop_reason == "max_turns"
    assert r.state["cleanup_errors"][0].type == "RuntimeError"


@pytest.mark.parametrize("style", ["tuple", "list"])
async def test_completion_mode_multiturn(server: ScriptedServer, client, style: str) -> None:
    class TextEnv(vf.MultiTurnEnv):
        async def env_response(self, messages, state, **kwargs):
            text = f"\n[env {state['turn']}]\n"
            return (text, state) if style == "tuple" else text

    server.set_script(ServerScript(replies=[ScriptedReply(content="<model>")]))
    env = TextEnv(dataset=[{"question": "Story:"}], message_type="completion", max_turns=2)
    out = await env.a_evaluate(client, "m")
    r = out.results[0]
    assert r.error is None
    assert r.completion == "<model>\n[env 1]\n<model>"  # no env response after the last turn
    assert server.requests[-1]["prompt"] == "Story:<model>\n[env 1]\n"


async def test_is_completed_checked_before_first_model_turn(server: ScriptedServer, client) -> None:
    class AlreadyDone(vf.MultiTurnEnv):
        async def setup_state(self, state, **kwargs):
            state["done"] = True  # e.g. the game was invalid / already solved
            return state

        async def is_completed(self, messages, state, **kwargs):
            return state["done"]

        async def env_response(self, messages, state, **kwargs):
            return [{"role": "user", "content": "x"}]

    env = AlreadyDone(dataset=DATA, max_turns=5)
    out = await env.a_evaluate(client, "m")
    assert server.n_requests == 0
    assert out.results[0].completion == []
    assert out.results[0].stop_reason == "completed"
