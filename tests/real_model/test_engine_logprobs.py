"""The engine on SmolLM2-135M-Instruct: greedy tokens and logprobs equal a plain transformers forward.

The reference is a separate ``AutoModelForCausalLM`` load of the same directory, run on the whole
prompt + completion at once (no cache, no batching, transformers' own attention), so the engine's
prefill, its own decoding step, its KV cache and its batching are all checked against it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from verifiers.data.templating import apply_chat_template  # noqa: E402
from verifiers.inference.engine import InferenceEngine  # noqa: E402
from verifiers.inference.engine.sampling import SamplingParams  # noqa: E402

pytestmark = pytest.mark.slow

# Two prompts of different lengths decoded in one batch; greedy, the first ends on its own.
QUESTIONS = ["What is the capital of France?", "Write one sentence about the sea."]
MAX_TOKENS = 24
TOL = 1e-4  # float32, as the tiny-model tests (tests/inference/test_server_chat.py)


@pytest.fixture(scope="module")
def engine(real_model_dir: Path) -> Iterator[InferenceEngine]:
    with InferenceEngine.from_pretrained(real_model_dir, max_batch_size=4, max_model_len=512) as eng:
        yield eng


@pytest.fixture(scope="module")
def reference(real_model_dir: Path) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(real_model_dir, dtype=torch.float32).eval()


def test_the_engine_decodes_with_its_own_step_on_the_real_model(engine: InferenceEngine) -> None:
    assert engine.model.dtype == torch.float32
    assert engine.fast_decoding, engine.decode_path
    assert engine.decode_path == "the engine's own decoding step"


async def test_greedy_tokens_and_logprobs_equal_a_transformers_forward(
        engine: InferenceEngine, reference: Any) -> None:
    import asyncio

    tok = engine.tokenizer
    prompts = [apply_chat_template(tok, [{"role": "user", "content": q}]) for q in QUESTIONS]
    params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, logprobs=True)
    outs = await asyncio.gather(*(engine.generate(p, params) for p in prompts))  # one batch
    finishes = []
    for prompt, out in zip(prompts, outs, strict=True):
        seq = out.outputs[0]
        ids, logprobs = list(seq.token_ids), list(seq.logprobs)
        assert len(ids) == len(logprobs) > 0
        with torch.no_grad():
            logits = reference(input_ids=torch.tensor([[*prompt, *ids]])).logits[0].float()
        expected = torch.log_softmax(logits[len(prompt) - 1: len(prompt) - 1 + len(ids)], dim=-1)
        assert expected.argmax(dim=-1).tolist() == ids  # greedy: the reference's argmax at every step
        gap = max(abs(a - float(expected[k, t])) for k, (t, a) in enumerate(zip(ids, logprobs, strict=True)))
        assert gap <= TOL, f"{QUESTIONS[prompts.index(prompt)]!r}: max |engine - transformers| = {gap:.2e}"
        if seq.finish_reason == "stop":
            assert ids[-1] in engine.eos_ids
        finishes.append(seq.finish_reason)
    assert "stop" in finishes, "no greedy reply ended on its own: the EOS path went unchecked"
