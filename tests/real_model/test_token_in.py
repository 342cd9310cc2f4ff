"""Token-in with a real BPE tokenizer: an agent program's second call continues the first's exact ids.

`AgentEnv(tokenizer=...)` (what a trainer's environment gets) runs a program that talks to
vf-serve through the interception gateway with the official ``openai`` client. Whether the first
reply ended on its own (``<|im_end|>``, finish ``stop``) or was cut at ``max_tokens``, the gateway
sends the second call as ``first prompt ids + first completion ids + the rendered tail`` instead
of messages, so the
rollout is one growing token sequence, whatever the 49,152-token BPE would make of the reply's
text. Its text must still be exactly what SmolLM2's chat template renders for the program's
messages (default system prompt included): only the ids of the sampled reply may differ.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

PROGRAM = Path(__file__).parent / "programs" / "two_turns.py"
QUESTIONS = ["What is the capital of France?", "Name one planet.", "Name a fruit."]
# Short answers end with <|im_end|> well within the budget; 0.7 gives the two rollouts of a
# question different replies (and so different BPE boundaries to get wrong).
SAMPLING = {"temperature": 0.7, "max_tokens": 48}


async def test_the_second_call_extends_the_first_token_for_token(vf_serve: Any, real_tokenizer: Any) -> None:
    import verifiers as vf

    env = vf.AgentEnv(command=[sys.executable, str(PROGRAM)], rubric=vf.Rubric(funcs=[lambda **_: 0.0]),
                      dataset=[{"question": q, "answer": ""} for q in QUESTIONS], tokenizer=real_tokenizer,
                      sampling_args=SAMPLING, timeout_s=240)
    client = vf.make_client(base_url=vf_serve.base_url, max_retries=0)
    try:
        out = await env.a_generate(env.get_dataset().rows, client, vf_serve.model, rollouts_per_example=2)
    finally:
        await client.close()
    continued = drifted = 0
    for r in out.results:
        assert r.error is None, r.error
        first, second = r.state["agent"]["calls"]
        # Call 1 went as messages: vf-serve rendered them as transformers does.
        want = real_tokenizer.apply_chat_template(first.messages, add_generation_prompt=True, tokenize=False)
        assert real_tokenizer.decode(first.tokens.prompt_ids) == want
        head = [*first.tokens.prompt_ids, *first.tokens.completion_ids]
        assert second.token_in and second.tokens.follow_up and second.tokens.token_in, r.state["agent"]
        assert second.tokens.prompt_ids[: len(head)] == head
        rendered = real_tokenizer.apply_chat_template(second.messages, add_generation_prompt=True, tokenize=False)
        assert real_tokenizer.decode(second.tokens.prompt_ids) == rendered
        user_turn = "<|im_start|>user\nNow say it in fewer words.<|im_end|>\n<|im_start|>assistant\n"
        if first.finish_reason != "stop":
            # A cut reply: its sampled ids, then the template's whole closing and the new turn.
            assert real_tokenizer.decode(second.tokens.prompt_ids[len(head):]) == "<|im_end|>\n" + user_turn
            continue
        assert first.tokens.completion_ids[-1] == real_tokenizer.convert_tokens_to_ids("<|im_end|>")
        # ...followed by the template's bridge and the new user turn, and nothing else.
        assert real_tokenizer.decode(second.tokens.prompt_ids[len(head):]) == "\n" + user_turn
        assert r.token_sequence().prefix_consistent
        continued += 1
        # Re-encoding that text (what a chat call would do) may merge the sampled reply's BPE tokens
        # otherwise (e.g. sampled "com" + "a", re-encoded "coma"); the rest must come out the same.
        reencoded = real_tokenizer.encode(rendered, add_special_tokens=False)
        ids = second.tokens.prompt_ids
        tail = ids[len(head):]
        assert reencoded[: len(first.tokens.prompt_ids)] == first.tokens.prompt_ids
        assert reencoded[len(reencoded) - len(tail):] == tail
        drifted += reencoded != ids
    print(f"{len(out.results)} of {len(out.results)} second calls went token-in, {continued} after a reply that "
          "ended on its own; "
          f"{drifted} of them differ from re-encoding the rendered text")
    # About 3 first replies in 4 end on their own here; none of 6 would leave the test checking nothing.
    assert continued >= 1, "no first reply ended on its own, so token-in went unchecked: shorten the questions"
