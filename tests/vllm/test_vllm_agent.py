"""An agent program through the interception gateway against a real vLLM server (CPU build)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import verifiers as vf
from verifiers.inference.loading import load_model_and_tokenizer
from verifiers.inference.vllm_admin import VLLMAdmin
from verifiers.inference.vllm_server import VLLMServer

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
