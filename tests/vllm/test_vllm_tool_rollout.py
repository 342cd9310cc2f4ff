"""A multi-turn tool rollout through vLLM's own tool-call parser, token-exact.

A random tiny model never emits a well-formed tool call, so this test first teaches one to
(a few seconds of supervised training on one conversation rendered by its chat template),
then serves it with vLLM (``--enable-auto-tool-choice --tool-call-parser hermes``). vLLM
parses the ``<tool_call>`` the model samples into ``tool_calls``; the environment runs the
tool and sends its result back; the model answers. Every turn's prompt must extend the
previous turn's prompt + sampled ids exactly, and the trainer's loss mask must cover exactly
the model's own tokens of both turns.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import verifiers as vf

TABLE = {"k7": "violet"}


def lookup(key: str) -> str:
    """Look a key up in the table.

    Args:
        key: The key to look up.
    """
    return TABLE.get(key, "missing")


def make_env() -> vf.ToolEnv:
    return vf.ToolEnv(tools=[lookup], max_turns=3, rubric=vf.Rubric(funcs=[]),
                      dataset=[{"question": "What is stored under k7?", "answer": "violet"}])


def tool_conversation(env: vf.ToolEnv) -> list[dict[str, Any]]:
    """The one conversation the tiny model is taught: call lookup, read the result, answer."""
    prompt = env.get_dataset().rows[0]["prompt"]
    call = {"id": "call_0", "type": "function", "function": {"name": "lookup", "arguments": {"key": "k7"}}}
    return [*prompt, {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "content": "violet", "tool_call_id": "call_0"},
            {"role": "assistant", "content": "violet"}]


@pytest.mark.slow
def test_tool_rollout_through_vllm_is_token_exact(tmp_path: Path, tiny_vllm_spec: Any, server_spec: Any,
                                                  teach_conversation: Any) -> None:
    from trainers.grpo.data.batch import row_from_result
    from verifiers.inference.vllm.server import VLLMServer
    from verifiers.models.tiny import save_tiny_model

    env = make_env()
    model_dir = save_tiny_model(tmp_path / "model", tiny_vllm_spec)
    # the tools block is part of the system turn: taught with the same schemas the rollout sends
    teach_conversation(model_dir, tool_conversation(env), tools=env.oai_tools)
    spec = server_spec(model_dir)
    # One token per character: with 0.1.5's schema text the first prompt alone is 452 tokens, so the
    # second turn needs more than the quickstart's 512-token context.
    limit = spec.extra_args.index("--max-model-len")
    spec.extra_args[limit + 1] = "2048"
    spec.extra_args += ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
    with VLLMServer(spec, log_path=tmp_path / "vllm.log") as server:
        client = vf.make_client(server.base_url)
        out = env.evaluate(client, "policy", num_examples=1, rollouts_per_example=2,
                           sampling_args={"temperature": 0.0, "max_tokens": 64, "logprobs": True,
                                          "extra_body": {"return_token_ids": True}})
    for r in out.results:
        assert r.error is None, r.error
        assistant = [m for m in r.completion if m["role"] == "assistant"]
        # vLLM's parser turned the sampled markup into a tool call; the tool ran; the model answered.
        (call,) = assistant[0]["tool_calls"]
        assert call["function"]["name"] == "lookup"
        tool_msgs = [m for m in r.completion if m["role"] == "tool"]
        assert [m["content"] for m in tool_msgs] == ["violet"]
        assert assistant[-1]["content"] == "violet"
        assert len(r.tokens) == 2
        first, second = r.tokens
        assert second.prompt_ids[: len(first.prompt_ids) + len(first.completion_ids)] == (
            first.prompt_ids + first.completion_ids)
        seq = r.token_sequence()
        assert seq.prefix_consistent
        row = row_from_result(r, 0, 4096, "truncate")
        assert row is not None
        trained = [row.input_ids[i + 1] for i, m in enumerate(row.loss_mask) if m]
        assert trained == first.completion_ids + second.completion_ids
