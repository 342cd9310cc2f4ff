"""An agent program through the interception gateway against a real vLLM server (CPU build)."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path
from typing import Any

import pytest

import verifiers as vf
from verifiers.inference.engine.loading import load_model_and_tokenizer
from verifiers.inference.vllm.admin import VLLMAdmin
from verifiers.inference.vllm.server import VLLMServer

PROGRAM = Path(__file__).parents[1] / "gateway" / "programs" / "chat_once.py"


async def test_agent_program_calls_are_recorded_with_vllms_own_token_ids(vllm_server: VLLMServer,
                                                                          vllm_model_dir: Path) -> None:
    tokenizer = load_model_and_tokenizer(vllm_model_dir)[1]
    env = vf.AgentEnv(command=[sys.executable, str(PROGRAM), "calls", "2"],
                      dataset=[{"question": "say something", "answer": ""}, {"question": "and more", "answer": ""}],
                      rubric=vf.Rubric(funcs=[lambda **_: 0.0]))
    # No token fields asked for: the gateway requests them upstream by itself.
    out = await env.a_generate(env.get_dataset().rows, vf.make_client(base_url=vllm_server.base_url), "policy",
                               sampling_args={"max_tokens": 8}, rollouts_per_example=2)
    admin = VLLMAdmin(vllm_server.base_url)
    assert len(out.results) == 4
    for r in out.results:
        assert r.error is None, r.error
        calls = r.state["agent"]["calls"]
        assert len(calls) == 2 and len(r.tokens) == 2
        for call, turn in zip(calls, r.tokens, strict=True):
            theirs: Any = admin.post("/tokenize", {"model": "policy", "messages": call.messages,
                                                   "add_generation_prompt": True})["tokens"]
            assert turn.prompt_ids == theirs
            assert 1 <= len(turn.completion_ids) <= 8 and len(turn.completion_logprobs) == len(turn.completion_ids)
            assert call.reply["content"] == tokenizer.decode(turn.completion_ids, skip_special_tokens=True)


OK_CONVERSATION = [{"role": "user", "content": "say something"}, {"role": "assistant", "content": "ok"},
                   {"role": "user", "content": "again 0"}, {"role": "assistant", "content": "ok"},
                   {"role": "user", "content": "again 1"}, {"role": "assistant", "content": "ok"}]
"""Taught so the tiny model answers "ok" and stops, turn after turn: a random one never stops, and
token-in continues only replies that ended on the stop token."""


@pytest.mark.slow
@pytest.mark.timeout(900)
async def test_follow_up_calls_go_to_vllm_as_token_ids(tmp_path: Path, tiny_vllm_spec: Any, server_spec: Any,
                                                       teach_conversation: Any) -> None:
    """Token-in against vLLM: /v1/completions with an id prompt, logprobs and return_token_ids."""
    from verifiers.models.tiny import save_tiny_model

    model_dir = save_tiny_model(tmp_path / "model", tiny_vllm_spec)
    teach_conversation(model_dir, OK_CONVERSATION)
    tokenizer = load_model_and_tokenizer(model_dir)[1]
    env = vf.AgentEnv(command=[sys.executable, str(PROGRAM), "calls", "3"],
                      dataset=[{"question": "say something", "answer": ""}],
                      rubric=vf.Rubric(funcs=[lambda **_: 0.0]), tokenizer=tokenizer,
                      sampling_args={"temperature": 0.0, "max_tokens": 16})
    with VLLMServer(server_spec(model_dir), log_path=tmp_path / "vllm.log") as server:
        out = await env.a_generate(env.get_dataset().rows, vf.make_client(base_url=server.base_url), "policy")
    (r,) = out.results
    assert r.error is None, r.error
    calls = r.state["agent"]["calls"]
    if [c.finish_reason for c in calls[:2]] != ["stop", "stop"]:
        pytest.fail(f"the taught model did not stop: {[(c.finish_reason, c.reply) for c in calls]}")
    assert [c.token_in for c in calls] == [False, True, True]
    assert [c.reply["content"] for c in calls] == ["ok", "ok", "ok"]
    for prev, call in itertools.pairwise(calls):
        sampled = prev.tokens.prompt_ids + prev.tokens.completion_ids
        assert call.tokens.prompt_ids[: len(sampled)] == sampled  # vLLM saw exactly what it sampled
        assert len(call.tokens.completion_logprobs) == len(call.tokens.completion_ids)
    assert r.token_sequence().prefix_consistent and len(r.token_rows()) == 1
