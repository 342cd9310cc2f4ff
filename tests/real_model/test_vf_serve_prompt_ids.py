"""vf-serve on SmolLM2-135M-Instruct: the prompt it samples from is exactly what transformers'
``apply_chat_template`` gives, default system prompt included.

SmolLM2's ChatML template writes a system message of its own ("You are a helpful AI assistant
named SmolLM, ...") when the conversation has none; a server that rendered its own way, or
tokenised the rendered text with special tokens added again, would sample from another prompt.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest

pytestmark = pytest.mark.slow

# The system message SmolLM2's template writes when the conversation has none.
DEFAULT_SYSTEM_PROMPT = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def _hf_prompt_ids(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    out = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    return list(out["input_ids"] if not isinstance(out, list) else out)  # a BatchEncoding in transformers 5


@pytest.mark.parametrize("messages", [
    [{"role": "user", "content": "What is 2 + 3?"}],
    [{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "Blue."},
     {"role": "user", "content": "Another one, please."}],
    [{"role": "system", "content": "Answer in French."}, {"role": "user", "content": "Hello!"}],
], ids=["one_user_turn", "three_turns", "own_system_prompt"])
def test_prompt_ids_equal_transformers_apply_chat_template(vf_serve: Any, real_tokenizer: Any,
                                                           messages: list[dict[str, str]]) -> None:
    client = openai.OpenAI(base_url=vf_serve.base_url, api_key="EMPTY", max_retries=0, timeout=120)
    try:
        r = client.chat.completions.create(model=vf_serve.model, messages=messages, max_tokens=4, temperature=0,
                                           extra_body={"return_token_ids": True})
    finally:
        client.close()
    prompt_ids = list(r.prompt_token_ids)
    assert prompt_ids == _hf_prompt_ids(real_tokenizer, messages)
    assert r.usage is not None and r.usage.prompt_tokens == len(prompt_ids)
    text = real_tokenizer.decode(prompt_ids)
    has_own = messages[0]["role"] == "system"
    assert (DEFAULT_SYSTEM_PROMPT in text) is not has_own
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")
    # One token per special marker: the template's <|im_start|> / <|im_end|> are not re-split by BPE.
    start, end = real_tokenizer.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>"])
    turns = len(messages) + (not has_own)
    assert prompt_ids.count(start) == turns + 1 and prompt_ids.count(end) == turns


def test_vf_serve_decodes_with_the_engines_own_step(vf_serve: Any) -> None:
    # vf-serve names the slow path on a CPU ("decoding with transformers' forward (why)"); here it has none.
    log = vf_serve.log.read_text()
    assert f"serving {vf_serve.model} on" in log
    assert "decoding with" not in log, log
