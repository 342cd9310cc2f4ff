"""SmolLM2-135M-Instruct calls a tool twice in one calculator rollout, and the rollout trains token-exactly.

The untrained model never writes a parseable call (forced to, it fills the arguments with prose),
so it is first taught one two-call episode of the environment's own kind, rendered by the
registry's tool template (a few dozen supervised steps, in memory). Then the environment runs
it through the in-process engine: both calls the model samples must parse into ``tool_calls``,
the tool must run on them, and the rollout's training rows must cover every sampled token exactly
once (and nothing else: not the tool results, not the template's markup between turns).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

pytestmark = pytest.mark.slow

QUESTION = "Compute (347 + 512) * 23 - 91 * 64."


def two_call_episode(env: Any) -> list[dict[str, Any]]:
    from calculator import calculate

    first, second = "(347 + 512) * 23", f"{calculate('(347 + 512) * 23')} - 91 * 64"
    answer = calculate(second)
    prompt = [{"role": "system", "content": env.system_prompt}, {"role": "user", "content": QUESTION}]

    def call(i: int, expression: str) -> dict[str, Any]:
        return {"id": f"c{i}", "type": "function",
                "function": {"name": "calculate", "arguments": json.dumps({"expression": expression})}}

    return [*prompt,
            {"role": "assistant", "content": "", "tool_calls": [call(0, first)]},
            {"role": "tool", "tool_call_id": "c0", "content": calculate(first)},
            {"role": "assistant", "content": "", "tool_calls": [call(1, second)]},
            {"role": "tool", "tool_call_id": "c1", "content": answer},
            {"role": "assistant", "content": f"\\boxed{{{answer}}}"}]


def teach(model: Any, tokenizer: Any, episode: list[dict[str, Any]], tools: list[dict[str, Any]]) -> float:
    """Supervised steps on the episode's assistant tokens until the model reproduces them."""
    import torch

    from trainers.grpo.data.batch import expert_rows

    (row,) = expert_rows(tokenizer, [episode], 4096, tools=[tools])
    ids = torch.tensor([row.input_ids])
    mask = torch.tensor([row.loss_mask], dtype=torch.float32)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    model.train()
    loss = torch.tensor(float("inf"))
    for _ in range(40):
        logits = model(input_ids=ids).logits[0, :-1].float()
        loss = (torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="none") * mask[0]).sum() / mask.sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if loss.item() < 2e-3:
            break
    model.eval()
    return float(loss.item())


def test_a_taught_real_model_makes_two_parsed_calls_and_every_sampled_token_trains_once(
        real_model_dir: Any, shipped_environments: None) -> None:
    import calculator

    from trainers.grpo.data.batch import rows_from_result
    from verifiers.inference.engine import InferenceEngine
    from verifiers.inference.engine.loading import load_model_and_tokenizer
    from verifiers.inference.server.runner import inprocess_client
    from verifiers.models.chat_templates import resolve_chat_template, use_chat_template

    env = calculator.load_environment(num_train_examples=1, num_eval_examples=1, max_turns=3)
    model, tok = load_model_and_tokenizer(real_model_dir, dtype="float32")
    use_chat_template(tok, resolve_chat_template(real_model_dir, None)[0])
    episode = two_call_episode(env)
    assert teach(model, tok, episode, env.oai_tools) < 5e-3
    row = {"question": QUESTION, "answer": episode[-1]["content"][len("\\boxed{"):-1], "info": {}}
    engine = InferenceEngine(model, tok, seed=0)
    try:
        client = inprocess_client(engine, ["smollm2"])
        out = asyncio.run(env.a_generate([row], client, "smollm2", {
            "temperature": 0.0, "max_tokens": 64, "logprobs": True, "extra_body": {"return_token_ids": True}}))
    finally:
        engine.stop()
    (r,) = out.results
    assert r.error is None, r.error
    calls = [tc for m in r.completion if m["role"] == "assistant" for tc in m.get("tool_calls") or []]
    assert [json.loads(c["function"]["arguments"]) for c in calls] == [
        json.loads(m["tool_calls"][0]["function"]["arguments"]) for m in episode if m.get("tool_calls")]
    assert [m["content"] for m in r.completion if m["role"] == "tool"] == [episode[3]["content"], episode[5]["content"]]
    assert r.reward == 1.0 and len(r.tokens) == 3
    sampled = [t for turn in r.tokens for t in turn.completion_ids]
    rows = rows_from_result(r, 0, 4096, "truncate")
    trained = [row.input_ids[i + 1] for row in rows for i, m in enumerate(row.loss_mask) if m]
    assert trained == sampled  # each sampled token once, in order; nothing the template or the tool added
