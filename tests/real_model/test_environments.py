"""Shipped environments evaluated end to end on SmolLM2-135M-Instruct behind vf-serve.

``doublecheck`` is multi-turn (answer, "Are you sure?", answer again); ``calculator`` is a
`vf.ToolEnv`. SmolLM2's own chat template drops tools; the registry's tool template
(``chatml-tools``) renders the schema in the system turn, so the model sees the tool (checked on
the prompt ids it sampled from). The untrained model still answers in prose. A second calculator
run names the tool in ``tool_choice`` (the server then starts the reply with ``<tool_call>{"name":
"calculate", "arguments": ``) and stops at ``</tool_call>`` (``stop`` with vLLM's
``include_stop_str_in_output``): whatever the untrained model writes as arguments goes through
the server's parser and, when it parses, the environment's tool and back, without an error.
That a call the real model samples parses is shown on a model taught one episode
(test_tool_rollout.py): untrained, it fills the arguments with a copy of the schema.

The three evaluations run concurrently, so vf-serve decodes all their rollouts in one batch.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytestmark = pytest.mark.slow

NAMED = {"type": "function", "function": {"name": "calculate"}}
FORCED_SAMPLING = {"temperature": 0, "max_tokens": 32, "tool_choice": NAMED, "stop": ["</tool_call>"],
                   "extra_body": {"include_stop_str_in_output": True}}
CALL_FORMAT = (' To call it, write <tool_call>{"name": "calculate", "arguments": {"expression": "12 * 34"}}'
               '</tool_call> and wait for the result.')


@pytest.fixture(scope="module")
def evaluations(vf_serve: Any, shipped_environments: None) -> dict[str, Any]:
    from calculator import SYSTEM_PROMPT

    import verifiers as vf

    doublecheck = vf.load_environment("doublecheck", num_train_examples=0, num_eval_examples=2)
    calculator = vf.load_environment("calculator", num_train_examples=0, num_eval_examples=2, max_turns=3)
    forced = vf.load_environment("calculator", num_train_examples=0, num_eval_examples=2, max_turns=2,
                                 system_prompt=SYSTEM_PROMPT + CALL_FORMAT)

    async def run_all() -> dict[str, Any]:
        client = vf.make_client(base_url=vf_serve.base_url, max_retries=0, timeout=300)
        try:
            runs = await asyncio.gather(
                doublecheck.a_evaluate(client, vf_serve.model, {"temperature": 0, "max_tokens": 128}),
                calculator.a_evaluate(client, vf_serve.model, {"temperature": 0.7, "max_tokens": 48, "logprobs": True,
                                                               "extra_body": {"return_token_ids": True}}),
                forced.a_evaluate(client, vf_serve.model, FORCED_SAMPLING),
            )
        finally:
            await client.close()
        return dict(zip(("doublecheck", "calculator", "calculator_named"), runs, strict=True))

    outs = asyncio.run(run_all())
    for name, out in outs.items():
        calls = sum(r.metrics.get("calculate_calls", 0) for r in out.results)
        print(f"{name}: rewards {out.reward}, stop reasons {out.stop_reason}" + (
            f", calculate calls {calls:g}" if name.startswith("calculator") else ""))
    return outs


def _no_errors(out: Any) -> None:
    assert len(out.results) == 2
    for r in out.results:
        assert r.error is None and not r.scoring_errors, (r.error, r.scoring_errors)
        # A reply cut at max_tokens ends a rollout (stop reason "length"); that is not an error.
        assert r.stop_reason in ("completed", "max_turns") or (r.stop_reason == "length" and r.is_truncated), \
            r.stop_reason
        assert 0.0 <= r.reward <= 1.0


def test_a_multi_turn_environment_runs_both_turns(evaluations: dict[str, Any]) -> None:
    out = evaluations["doublecheck"]
    _no_errors(out)
    roles = [[m["role"] for m in r.completion] for r in out.results]
    for r, seen in zip(out.results, roles, strict=True):
        assert set(r.metrics) >= {"correct_final", "correct_first", "consistent"}
        assert all(isinstance(m["content"], str) and m["content"] for m in r.completion)
        if r.stop_reason == "length":  # cut in its first or second answer
            assert seen in (["assistant"], ["assistant", "user", "assistant"])
            continue
        assert seen == ["assistant", "user", "assistant"]
        assert r.completion[1]["content"].startswith("Are you sure?")
    assert ["assistant", "user", "assistant"] in roles, "no rollout reached its second turn"


def _tool_calls(r: Any) -> list[dict[str, Any]]:
    """Each assistant tool call of a rollout, checked to be answered by the tool message after it
    (all but those of the last message when the rollout ran out of turns with a call)."""
    calls = []
    for i, m in enumerate(r.completion):
        if m["role"] != "assistant" or not m.get("tool_calls"):
            continue
        answers = r.completion[i + 1: i + 1 + len(m["tool_calls"])]
        if i == len(r.completion) - 1 and r.stop_reason == "max_turns":
            answers = [None] * len(m["tool_calls"])
        for call, answer in zip(m["tool_calls"], answers, strict=True):
            assert call["function"]["name"] == "calculate" and isinstance(call["function"]["arguments"], str)
            if answer is not None:
                assert answer["role"] == "tool" and answer["tool_call_id"] == call["id"]
                assert isinstance(answer["content"], str) and answer["content"]
            calls.append(call)
    return calls


def test_a_tool_environment_completes_cleanly_and_shows_the_model_its_tool(evaluations: dict[str, Any],
                                                                          real_tokenizer: Any) -> None:
    out = evaluations["calculator"]
    _no_errors(out)
    for r in out.results:
        assert r.completion[0]["role"] == "assistant"
        assert len(_tool_calls(r)) == r.metrics["calculate_calls"]  # whether or not it called the tool
        prompt = real_tokenizer.decode(r.tokens[0].prompt_ids)
        assert '<tools>\n{"type": "function", "function": {"name": "calculate"' in prompt


def test_forced_tool_calls_go_through_the_parser_without_errors(evaluations: dict[str, Any]) -> None:
    out = evaluations["calculator_named"]
    _no_errors(out)
    for r in out.results:
        assert len(_tool_calls(r)) == r.metrics["calculate_calls"]
        text = "".join(m.get("content") or "" for m in r.completion if m["role"] == "assistant")
        assert _tool_calls(r) or text.startswith('<tool_call>{"name": "calculate", "arguments": ')
