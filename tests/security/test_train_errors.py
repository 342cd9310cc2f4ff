"""vf-train's errors name the real cause: a broken expert file, failing rollouts, missing token ids.

Before the fix a malformed expert_data line raised a raw JSONDecodeError traceback, and a step
without trainable rows always blamed the server ("must return token ids"), also when every
rollout had failed in the environment or at the server before the model answered.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")

from trainers.grpo.data.assemble import no_rows_reason
from trainers.grpo.data.prompts import load_expert
from verifiers.errors import ConfigError
from verifiers.types import RolloutError, RolloutResult


def rollout(error: RolloutError | None = None) -> RolloutResult:
    return RolloutResult(example_id=0, rollout_index=0, prompt=[{"role": "user", "content": "q"}],
                         completion=[], error=error)


def test_malformed_expert_data_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "expert.jsonl"
    path.write_text('{"messages": [{"role": "user", "content": "a"}]}\n{"messages": [oops\n')
    with pytest.raises(ConfigError, match=r"expert\.jsonl:2 is not valid JSON .*one JSON object with a 'messages' list"):
        load_expert(str(path), tokenizer=None, max_seq_len=64)


def test_an_environment_that_always_raises_is_not_blamed_on_the_server() -> None:
    failed = [rollout(RolloutError(type="KeyError", message="'answer'", where="env_response"))] * 4
    reason = no_rows_reason(failed, step=0, max_seq_len=512)
    assert "every rollout of step 1 ended with an error" in reason and "KeyError" in reason
    assert "env_response: 'answer'" in reason and "token ids" not in reason


def test_an_overlong_prompt_names_the_context_not_token_ids() -> None:
    failed = [rollout(RolloutError(type="OverlongPromptError", message="maximum context length is 128 tokens",
                                   where="model"))] * 2
    reason = no_rows_reason(failed, step=4, max_seq_len=512)
    assert "maximum context length" in reason and "token ids" not in reason


def test_missing_token_ids_still_say_so() -> None:
    reason = no_rows_reason([rollout()] * 2, step=0, max_seq_len=512)
    assert "the server must return token ids (return_token_ids) and logprobs" in reason


def test_prompts_over_the_context_say_so_not_token_ids() -> None:
    # What a rollout looks like when the server refuses the prompt as over its context: the
    # environment ends it as truncated with stop reason prompt_too_long, without an error.
    overlong = RolloutResult(example_id=0, prompt=[{"role": "user", "content": "q"}], completion=[],
                             stop_reason="prompt_too_long", is_truncated=True)
    reason = no_rows_reason([overlong] * 3, step=2, max_seq_len=512)
    assert "every rollout of step 3 stopped before the model answered" in reason
    assert "lower max_tokens" in reason and "token ids" not in reason

