"""0.1.x ``process_env_results_vllm`` from real server token ids (embedded server, tiny model).

A two-turn 0.1.x MultiTurnEnv runs against the embedded OpenAI-compatible server over
HTTP with the official client, asking for token ids and logprobs as a trainer does.
The processed outputs must be token-exact: the prompt is what the server tokenised,
the sampled tokens are the server's, and the environment's message is exactly the
tokens the server inserted before the second turn (masked with mask_env_responses).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from openai import AsyncOpenAI  # noqa: E402

import verifiers as vf  # noqa: E402
from verifiers.compat.env_adapters import ProcessedOutputs  # noqa: E402
from verifiers.inference.engine import InferenceEngine  # noqa: E402
from verifiers.inference.engine.loading import load_model_and_tokenizer  # noqa: E402
from verifiers.inference.server.runner import EmbeddedServer  # noqa: E402
from verifiers.models.tiny import IM_END, TinyModelSpec, save_tiny_model  # noqa: E402

MODEL = "tiny"
IM_END_ID = 0  # set by the `tiny` fixture


def sampling() -> dict[str, Any]:
    # The tiny model's own EOS is <|endoftext|>, but its chat template closes a turn with
    # <|im_end|>: a turn ended by the former is not a prefix of the next prompt. As with a
    # real chat model, end turns on the template's token.
    extra = {"return_token_ids": True, "ignore_eos": True, "stop_token_ids": [IM_END_ID]}
    return {"max_tokens": 40, "temperature": 0.0, "logprobs": True, "extra_body": extra}


# Greedy first turns of these questions end with <|im_end|> on the seeded model below (so
# the episode reaches a second turn); second turns run to max_tokens (stop_reason "length").
QUESTIONS = ["Hello, world!", "0123456789"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model with weights redrawn (seeded, std 0.2) so greedy output varies and can stop."""
    out = save_tiny_model(tmp_path_factory.mktemp("compat-tiny") / "model", TinyModelSpec(seed=0))
    model, _ = load_model_and_tokenizer(out, with_tokenizer=False)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.2)
    model.save_pretrained(out)
    global IM_END_ID
    IM_END_ID = load_model_and_tokenizer(out)[1].convert_tokens_to_ids(IM_END)
    return out


@pytest.fixture(scope="module")
def served(tiny: Path) -> Iterator[EmbeddedServer]:
    torch.set_num_threads(1)
    with InferenceEngine.from_pretrained(tiny) as engine, EmbeddedServer(engine, [MODEL]) as srv:
        yield srv


class EchoTwice(vf.MultiTurnEnv):
    """0.1.x style: two model turns with one environment message between them."""

    async def env_response(self, messages, state, **kwargs):
        return [{"role": "user", "content": "again"}], state


def tokens_of(state: dict[str, Any]) -> list[Any]:
    return state["tokens"]


def test_process_env_results_vllm_is_token_exact(served: EmbeddedServer, tiny: Path) -> None:
    _, tokenizer = load_model_and_tokenizer(tiny)
    env = EchoTwice(dataset=[{"question": q} for q in QUESTIONS], max_turns=2)
    out = env.evaluate(AsyncOpenAI(base_url=served.base_url, api_key="EMPTY"), MODEL, sampling_args=sampling())
    assert out.error == [None, None]
    assert [len(s["tokens"]) for s in out.state] == [2, 2]
    rewards = [0.25, 0.75]
    proc = env.process_env_results_vllm(
        out.prompt, out.completion, out.state, rewards, tokenizer, mask_env_responses=True
    )
    assert isinstance(proc, ProcessedOutputs)
    assert proc.rewards == rewards
    for i, state in enumerate(out.state):
        first, second = tokens_of(state)
        # The prompt is the server's own tokenisation, which is the chat template's.
        expected_prompt = tokenizer.apply_chat_template(out.prompt[i], add_generation_prompt=True, tokenize=True)
        if hasattr(expected_prompt, "keys"):  # a BatchEncoding in recent transformers
            expected_prompt = expected_prompt["input_ids"]
        assert proc.prompt_ids[i] == first.prompt_ids == list(expected_prompt)
        assert proc.prompt_mask[i] == [0] * len(first.prompt_ids)
        # Between the turns: exactly what the server inserted (end of turn, the env message, header).
        env_ids = second.prompt_ids[len(first.prompt_ids) + len(first.completion_ids) :]
        assert "again" in tokenizer.decode(env_ids)
        assert proc.completion_ids[i] == first.completion_ids + env_ids + second.completion_ids
        assert proc.completion_mask[i] == [1] * len(first.completion_ids) + [0] * len(env_ids) + [1] * len(
            second.completion_ids
        )
        assert proc.completion_logprobs[i][: len(first.completion_ids)] == first.completion_logprobs
        assert all(lp < 0 for lp in first.completion_logprobs)
        assert proc.completion_logprobs[i][len(first.completion_ids) : len(first.completion_ids) + len(env_ids)] == [
            0.0
        ] * len(env_ids)
        # Each sampled turn decodes to the message the environment saw.
        assert tokenizer.decode(first.completion_ids, skip_special_tokens=True) == out.completion[i][0]["content"]

    unmasked = env.process_env_results_vllm(out.prompt, out.completion, out.state, rewards, tokenizer)
    assert all(set(m) == {1} for m in unmasked.completion_mask)

    # max_seq_len cuts as 0.1.x did; truncated rows can be masked and zeroed.
    limit = len(proc.prompt_ids[0]) + 3
    cut = env.process_env_results_vllm(
        out.prompt, out.completion, out.state, rewards, tokenizer, max_seq_len=limit,
        mask_truncated_completions=True, zero_truncated_completions=True,
    )
    assert len(cut.prompt_ids[0]) + len(cut.completion_ids[0]) == limit
    assert cut.completion_ids[0] == proc.completion_ids[0][:3] and cut.completion_mask[0] == [0, 0, 0]
    assert cut.rewards[0] == 0


def test_without_token_ids_the_error_says_how_to_get_them(served: EmbeddedServer) -> None:
    env = EchoTwice(dataset=[{"question": "hi"}], max_turns=1)
    out = env.evaluate(AsyncOpenAI(base_url=served.base_url, api_key="EMPTY"), MODEL, sampling_args={"max_tokens": 2})
    with pytest.raises(vf.EnvError, match="return_token_ids"):
        env.process_env_results_vllm(out.prompt, out.completion, out.state, [0.0], None)
