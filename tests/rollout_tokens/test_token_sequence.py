"""Token-exact multi-turn sequences with a loss mask, from real server token ids."""

from __future__ import annotations

import verifiers as vf
from verifiers.rollout.tokens import assemble_tokens
from verifiers.testing import ScriptedReply, ScriptedServer, ServerScript
from verifiers.types import TurnTokens


def test_assemble_masks_environment_tokens() -> None:
    turns = [
        TurnTokens(prompt_ids=[1, 2], completion_ids=[3, 4], completion_logprobs=[-0.1, -0.2]),
        TurnTokens(prompt_ids=[1, 2, 3, 4, 9, 9], completion_ids=[5], completion_logprobs=[-0.3]),
    ]
    seq = assemble_tokens(turns)
    assert seq.prompt_ids == [1, 2]
    assert seq.completion_ids == [3, 4, 9, 9, 5]
    assert seq.completion_mask == [1, 1, 0, 0, 1]
    assert seq.completion_logprobs == [-0.1, -0.2, 0.0, 0.0, -0.3]
    assert seq.prefix_consistent


def test_assemble_flags_retokenised_prefix() -> None:
    turns = [
        TurnTokens(prompt_ids=[1, 2], completion_ids=[3]),
        TurnTokens(prompt_ids=[1, 7, 3, 9], completion_ids=[5]),
    ]
    assert not assemble_tokens(turns).prefix_consistent


class TwoTurns(vf.MultiTurnEnv):
    async def env_response(self, messages, state, **kwargs):
        return [{"role": "user", "content": "again"}]


async def test_multiturn_rollout_over_http_is_token_exact() -> None:
    env = TwoTurns(dataset=[{"question": "hi", "answer": ""}], max_turns=2)
    script = ServerScript(replies=[ScriptedReply(content="turn{turn}")])
    async with ScriptedServer(script) as server:
        client = vf.make_client(server.base_url, max_retries=0)
        out = await env.a_evaluate(
            client, "scripted", sampling_args={"logprobs": True, "extra_body": {"return_token_ids": True}}
        )
        await client.close()
    result = out.results[0]
    assert len(result.tokens) == 2
    seq = result.token_sequence()
    assert seq.prefix_consistent
    text = "".join(map(chr, seq.completion_ids))
    sampled = "".join(chr(t) for t, m in zip(seq.completion_ids, seq.completion_mask, strict=True) if m)
    assert sampled == "turn0turn1"
    assert "again" in text and "again" not in sampled
    assert all(lp < 0 for lp, m in zip(seq.completion_logprobs, seq.completion_mask, strict=True) if m)
