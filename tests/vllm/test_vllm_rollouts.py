"""Evaluation and rollouts against a real vLLM server: token ids, logprobs, token-exact multi-turn rows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

import verifiers as vf
from verifiers.inference.engine.loading import load_model_and_tokenizer
from verifiers.inference.vllm.admin import VLLMAdmin
from verifiers.inference.vllm.server import VLLMServer

REPO = Path(__file__).resolve().parents[2]
TRAINING_SAMPLING = {"logprobs": True, "extra_body": {"return_token_ids": True}}


@pytest.fixture(scope="module")
def tokenizer(vllm_model_dir: Path) -> Any:
    return load_model_and_tokenizer(vllm_model_dir)[1]


def test_vf_eval_saves_vllm_token_ids_equal_to_the_chat_template(vllm_server: VLLMServer, tmp_path: Path,
                                                                 tokenizer: Any, child_env: dict[str, str]) -> None:
    env = dict(child_env)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "environments" / "reverse_text"), str(REPO),
                                         env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.pop("OPENAI_API_KEY", None)
    out_dir = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "verifiers.cli.eval", "reverse-text", "-b", vllm_server.base_url, "-m", "policy",
         "-n", "3", "-r", "2", "-t", "12", "-s", "-o", str(out_dir), "-S", json.dumps(TRAINING_SAMPLING),
         "--no-progress"],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    (results,) = out_dir.rglob("results.jsonl")
    rows = [json.loads(line) for line in results.read_text().splitlines() if line.strip()]
    assert len(rows) == 6
    admin = VLLMAdmin(vllm_server.base_url)
    for row in rows:
        assert row["error"] is None
        (turn,) = row["tokens"]
        ours = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True)
        ours = list(ours["input_ids"] if hasattr(ours, "keys") else ours)
        theirs = admin.post("/tokenize", {"model": "policy", "messages": row["prompt"],
                                          "add_generation_prompt": True})["tokens"]
        assert turn["prompt_ids"] == ours == theirs
        assert 1 <= len(turn["completion_ids"]) <= 12
        assert len(turn["completion_logprobs"]) == len(turn["completion_ids"])
        assert all(lp <= 0 for lp in turn["completion_logprobs"])
        assert row["completion"][-1]["content"] == tokenizer.decode(turn["completion_ids"], skip_special_tokens=True)


def test_sampling_logprobs_are_the_models_raw_logprobs(vllm_server: VLLMServer, vllm_model_dir: Path) -> None:
    """What off-policy correction relies on: vLLM's sampling logprobs equal the policy's log-softmax."""
    import torch

    model, _ = load_model_and_tokenizer(vllm_model_dir)
    client = vf.make_client(vllm_server.base_url)
    env = vf.SingleTurnEnv(dataset=[{"question": "Say q", "answer": "q"}], rubric=vf.Rubric(funcs=[]))
    out = env.evaluate(client, "policy", num_examples=1, rollouts_per_example=4,
                       sampling_args={**TRAINING_SAMPLING, "max_tokens": 8, "temperature": 1.0})
    for r in out.results:
        (turn,) = r.tokens
        ids = torch.tensor([turn.prompt_ids + turn.completion_ids])
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=ids).logits[0].float(), -1)
        p = len(turn.prompt_ids)
        ref = [float(logp[p - 1 + j, t]) for j, t in enumerate(turn.completion_ids)]
        assert turn.completion_logprobs == pytest.approx(ref, abs=1e-4)


def test_vf_vllm_serves_the_token_in_endpoint(vllm_server: VLLMServer, vllm_model_dir: Path) -> None:
    """``/inference/v1/generate`` (what verifiers v1's and prime-rl's training clients call) is on:
    token ids in, the sampled ids and the policy's logprobs out, plain and streamed."""
    import torch

    model, tok = load_model_and_tokenizer(vllm_model_dir)
    prompt = tok.encode("Once upon a time")
    admin = VLLMAdmin(vllm_server.base_url)
    out = admin.post("/inference/v1/generate", {"model": "policy", "token_ids": prompt, "sampling_params": {
        "max_tokens": 6, "temperature": 1.0, "seed": 1, "logprobs": 0}})
    (choice,) = out["choices"]
    ids, lps = choice["token_ids"], [e["logprob"] for e in choice["logprobs"]["content"]]
    assert len(ids) == len(lps) > 0
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=torch.tensor([prompt + ids])).logits[0].float(), -1)
    assert lps == pytest.approx([float(logp[len(prompt) - 1 + j, t]) for j, t in enumerate(ids)], abs=1e-4)
    req = urllib.request.Request(vllm_server.root + "/inference/v1/generate", headers={"Content-Type": "application/json"},
                                 data=json.dumps({"model": "policy", "token_ids": prompt, "stream": True,
                                                  "sampling_params": {"max_tokens": 6, "temperature": 1.0,
                                                                      "seed": 1}}).encode())
    with urllib.request.urlopen(req, timeout=120) as resp:
        events = [e.removeprefix("data: ") for e in resp.read().decode().split("\n\n") if e]
    assert events[-1] == "[DONE]"
    assert [t for e in events[:-1] for t in json.loads(e)["choices"][0]["token_ids"]] == ids  # same seed, same ids


def test_seeded_requests_whose_prompts_exceed_the_token_budget_all_complete(vllm_server: VLLMServer) -> None:
    """A trainer step's seeded requests in one burst (the Quickstart's groups of 16: 128 at once).

    vLLM's CPU build (0.32) crashed its engine here when chunked prefill split a seeded request's
    prompt (a CPU generator has no offset to rewind): every later request then failed to connect.
    `build_command` turns chunked prefill off on a CPU; this is the burst that crashed it.
    """
    import asyncio

    from openai import AsyncOpenAI

    async def burst() -> list[Any]:
        async with AsyncOpenAI(base_url=vllm_server.base_url, api_key="none") as client:
            return await asyncio.gather(*(
                client.chat.completions.create(
                    model="policy", max_tokens=4, temperature=1.0, seed=1000 + i,
                    messages=[{"role": "user", "content": f"Repeat the letter {'abcd'[i % 4]}, " + "please " * 8}])
                for i in range(160)))

    replies = asyncio.run(burst())
    assert len(replies) == 160 and all(r.usage.completion_tokens >= 1 for r in replies)
    assert sum(r.usage.prompt_tokens for r in replies) > 8192  # more than one step's token budget


class EchoTurns(vf.MultiTurnEnv):
    """Three model turns; the environment answers between them (its tokens are not the model's)."""

    async def env_response(self, messages: Any, state: Any, **kwargs: Any) -> Any:
        return [{"role": "user", "content": f"again ({len(messages)})"}]


def test_multiturn_rollout_is_token_exact_and_masks_environment_tokens(vllm_server: VLLMServer,
                                                                      tokenizer: Any) -> None:
    from trainers.grpo.data.batch import row_from_result

    env = EchoTurns(dataset=[{"question": "Say hi", "answer": ""}], max_turns=3, rubric=vf.Rubric(funcs=[]))
    client = vf.make_client(vllm_server.base_url)
    # A turn cut by max_tokens ends the episode, and a random model rarely ends its turn: a logit
    # bias on the end-of-turn token makes each turn end by itself after a few tokens (the
    # returned logprobs stay the raw ones). The seed makes the test repeatable.
    eot = tokenizer.convert_tokens_to_ids("<|im_end|>")
    out = env.evaluate(client, "policy", num_examples=1, rollouts_per_example=3,
                       sampling_args={**TRAINING_SAMPLING, "max_tokens": 48, "seed": 7,
                                      "logit_bias": {str(eot): 4.0}})
    for r in out.results:
        assert r.error is None
        assert len(r.tokens) == 3
        seq = r.token_sequence()
        assert seq.prefix_consistent
        # Every turn's prompt is the previous prompt + the sampled ids + environment ids, exactly.
        for a, b in zip(r.tokens, r.tokens[1:], strict=False):
            assert b.prompt_ids[: len(a.prompt_ids) + len(a.completion_ids)] == a.prompt_ids + a.completion_ids
        sampled = [t for t, m in zip(seq.completion_ids, seq.completion_mask, strict=True) if m]
        assert sampled == [t for turn in r.tokens for t in turn.completion_ids]
        inserted = tokenizer.decode([t for t, m in zip(seq.completion_ids, seq.completion_mask, strict=True) if not m])
        assert "again" in inserted
        # The trainer's row: the loss mask covers exactly the model's own tokens of every turn.
        row = row_from_result(r, 0, 4096, "truncate")
        assert row is not None
        trained = [row.input_ids[i + 1] for i, m in enumerate(row.loss_mask) if m]
        assert trained == sampled
        assert sum(1 for lp in row.sampler_logp if lp != 0.0) == len(sampled)
