"""Training sequences rebuilt with a tokenizer, as verifiers 0.1.x built them.

Why this exists next to `verifiers.rollout.tokens`: the exact path (the ids the server
returned per call) is what the trainer uses, but environments written for 0.1.x call
these methods themselves, in tests and in their own training scripts, and against servers
that return no token ids (hosted APIs, mocks). Each function reproduces one 0.1.x method:

- `chat_format` / `completion_format`: 0.1.2's ``process_chat_format`` /
  ``process_completion_format`` (re-apply the chat template prefix by prefix);
- `chat_format_from_responses` / `completion_format_from_responses`: 0.1.5's
  ``process_chat_format_vllm`` / ``process_completion_format_vllm`` (the model's own
  turns from its responses, the environment's turns by template differences);
- `truncate_row`: 0.1.x's ``max_seq_len`` cut with ``mask_truncated_completions``.

``processing_class`` is any tokenizer with ``apply_chat_template`` and ``encode``
(transformers' ``PreTrainedTokenizerBase``); nothing here imports transformers.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from verifiers.errors import EnvError
from verifiers.types import Message, State

Row = tuple[list[int], list[int], list[int], list[int], list[float]]
"""prompt ids, prompt mask, completion ids, completion mask, completion logprobs."""


def _as_ids(value: Any) -> list[int]:
    """Token ids from ``apply_chat_template(tokenize=True)``: a list in transformers 4, a
    ``BatchEncoding`` (``input_ids``) in transformers 5."""
    if isinstance(value, list):
        return [int(v) for v in value]
    return [int(v) for v in value["input_ids"]]


def _templated(processing_class: Any, messages: list[Message], add_generation_prompt: bool = False) -> list[int]:
    """``apply_chat_template`` called as 0.1.5 called it: ``conversation=`` by keyword, and
    ``add_generation_prompt`` only when it is True (a stand-in tokenizer in a 0.1.x test may
    default it otherwise; transformers' default is False)."""
    if add_generation_prompt:
        return _as_ids(processing_class.apply_chat_template(conversation=messages, add_generation_prompt=True))
    return _as_ids(processing_class.apply_chat_template(conversation=messages))


def _template_ids(processing_class: Any, messages: Sequence[Message], add_generation_prompt: bool) -> list[int]:
    text = processing_class.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=add_generation_prompt)
    return list(processing_class.encode(text))


def chat_format(
    prompt: Sequence[Message], completion: Sequence[Message], processing_class: Any, mask_env_responses: bool = False
) -> tuple[list[int], list[int], list[int], list[int]]:
    """0.1.2 ``process_chat_format``: each completion message's ids are what it adds to the templated prefix."""
    prompt_ids = _template_ids(processing_class, prompt, add_generation_prompt=True)
    completion_ids: list[int] = []
    completion_mask: list[int] = []
    prev_ids = prompt_ids
    for i, msg in enumerate(completion):
        current_ids = _template_ids(processing_class, [*prompt, *completion[: i + 1]], add_generation_prompt=False)
        if current_ids[: len(prev_ids) - 1] != prev_ids[:-1]:
            raise EnvError(
                f"the chat template is not prefix-stable at completion message {i}: re-rendering the "
                "conversation changed earlier tokens (templates that drop earlier <think> blocks do this); "
                "train from the server's token ids instead (process_env_results_vllm)"
            )
        new_tokens = current_ids[len(prev_ids) :]
        if not new_tokens:
            raise EnvError(f"completion message {i} added no tokens to the templated conversation")
        completion_ids.extend(new_tokens)
        masked = msg.get("role") != "assistant" and mask_env_responses
        completion_mask.extend([0 if masked else 1] * len(new_tokens))
        prev_ids = current_ids
    return prompt_ids, [0] * len(prompt_ids), completion_ids, completion_mask


def completion_format(prompt: str, completion: str, processing_class: Any) -> tuple[list[int], list[int], list[int], list[int]]:
    """0.1.2 ``process_completion_format``: prompt and completion encoded separately."""
    prompt_ids = list(processing_class.encode(prompt))
    completion_ids = list(processing_class.encode(completion))
    return prompt_ids, [0] * len(prompt_ids), completion_ids, [1] * len(completion_ids)


def _with_parsed_arguments(message: Message) -> Message:
    """0.1.5 decoded tool-call arguments before templating (Qwen3-style templates expect objects)."""

    def parsed(call: Any) -> dict[str, Any]:
        call = dict(call)
        function = dict(call["function"])
        return {**call, "function": {**function, "arguments": json.loads(function["arguments"])}}

    return {**message, "tool_calls": [parsed(c) for c in message.get("tool_calls") or []]}


def _env_turn_ids(processing_class: Any, consumed: list[Message], turn: list[Message]) -> list[int]:
    prefix = _templated(processing_class, consumed)
    with_turn = _templated(processing_class, consumed + turn)
    if with_turn[: len(prefix)] != prefix:
        raise EnvError(f"token prefix mismatch: the chat template re-rendered earlier turns ({prefix} vs {with_turn})")
    return list(with_turn[len(prefix) :])


def chat_format_from_responses(
    prompt: Sequence[Message],
    completion: Sequence[Message],
    state: State,
    processing_class: Any,
    mask_env_responses: bool,
    turn_tokens: Callable[[Any], list[int]],
    turn_logprobs: Callable[[Any], list[float]],
) -> Row:
    """0.1.5 ``process_chat_format_vllm``: assistant turns from ``state["responses"]``, one per assistant message."""
    responses = list(state["responses"])
    assistant_turns = sum(1 for m in completion if m.get("role") == "assistant")
    if assistant_turns != len(responses):
        raise EnvError(f"{assistant_turns} assistant messages but {len(responses)} responses in state['responses']")
    prompt_ids = _templated(processing_class, list(prompt), add_generation_prompt=True)
    consumed: list[Message] = list(prompt)
    ids: list[int] = []
    mask: list[int] = []
    logprobs: list[float] = []
    turn_responses = iter(responses)
    i = 0
    while i < len(completion):
        message = _with_parsed_arguments(completion[i])
        if message["role"] == "assistant":
            response = next(turn_responses)
            turn = turn_tokens(response)
            ids += turn
            mask += [1] * len(turn)
            logprobs += turn_logprobs(response)
            consumed.append(message)
            i += 1
            continue
        j = i + 1
        while j < len(completion) and completion[j].get("role") != "assistant":
            j += 1
        env_msgs = [message, *(_with_parsed_arguments(m) for m in completion[i + 1 : j])]
        turn = _env_turn_ids(processing_class, consumed, env_msgs)
        ids += turn
        mask += [0 if mask_env_responses else 1] * len(turn)
        logprobs += [0.0] * len(turn)
        consumed += env_msgs
        i = j
    return prompt_ids, [0] * len(prompt_ids), ids, mask, logprobs


def completion_format_from_responses(
    prompt: str,
    completion: str,
    state: State,
    processing_class: Any,
    mask_env_responses: bool,
    turn_tokens: Callable[[Any], list[int]],
    turn_logprobs: Callable[[Any], list[float]],
) -> Row:
    """0.1.5 ``process_completion_format_vllm``: model text from its responses, the rest by encoding differences."""
    responses = list(state["responses"])
    starts = list(state.get("responses_start_idx") or [])
    if len(responses) != len(starts):
        raise EnvError("state['responses_start_idx'] needs one start index per response")
    pieces: list[tuple[str, Any]] = []
    idx = 0
    for response, start in zip(responses, starts, strict=True):
        if start > idx:
            pieces.append((completion[idx:start], None))
        text = response.choices[0].text or ""
        pieces.append((text, response))
        idx = start + len(text)
    if idx != len(completion):
        raise EnvError("the completion has text after the last response that state['responses_start_idx'] does not cover")
    prompt_ids = list(processing_class.encode(prompt))
    consumed = prompt
    ids: list[int] = []
    mask: list[int] = []
    logprobs: list[float] = []
    for text, response in pieces:
        if response is not None:
            turn = turn_tokens(response)
            ids += turn
            mask += [1] * len(turn)
            logprobs += turn_logprobs(response)
        else:
            prefix = list(processing_class.encode(consumed))
            with_turn = list(processing_class.encode(consumed + text))
            if with_turn[: len(prefix)] != prefix:
                raise EnvError("token prefix mismatch: encoding the environment's text changed earlier tokens")
            turn = with_turn[len(prefix) :]
            ids += turn
            mask += [0 if mask_env_responses else 1] * len(turn)
            logprobs += [0.0] * len(turn)
        consumed += text
    return prompt_ids, [0] * len(prompt_ids), ids, mask, logprobs


def truncate_row(row: Row, max_seq_len: int, mask_truncated_completions: bool) -> tuple[Row, bool]:
    """0.1.x's ``max_seq_len`` cut: the prompt first to the limit, the completion to what is left."""
    prompt_ids, prompt_mask, ids, mask, logprobs = row
    if max_seq_len <= 0 or len(prompt_ids) + len(ids) <= max_seq_len:
        return row, False
    prompt_ids, prompt_mask = prompt_ids[:max_seq_len], prompt_mask[:max_seq_len]
    room = max_seq_len - len(prompt_ids)
    ids, mask, logprobs = ids[:room], mask[:room], logprobs[:room]
    if mask_truncated_completions:
        mask = [0] * len(ids)
    return (prompt_ids, prompt_mask, ids, mask, logprobs), True
