"""Expert episodes through the program: a scripted expert to run it against, and SFT rows from the run.

The expert is the scripted server (`verifiers.testing`) answering the program's first call with
``lookup`` of the asked key and its second with the tool's reply, so the episodes are recorded
exactly as training rollouts are: the program's own messages, through the gateway, saved by
``vf-eval -s``. A saved run (``results.jsonl``: one `RolloutResult` a line) holds each
episode's prompt and completion but not the tool schemas the program sent, which the chat
template renders into the prompt; `expert_rows` adds them (the program's ``TOOLS``), keeps the correct episodes only
and returns the ``{"messages", "tools"}`` rows the trainer's ``expert_data`` reads
(examples/make_agent_lookup_expert.py does all of it).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from typing import Any

from verifiers.testing import ScriptedReply, ScriptedToolCall, ServerScript

__all__ = ["CHATTY_ANSWER", "chatty_rows", "expert_rows", "expert_script", "program_tools"]

CHATTY_ANSWER = "The value of {key} is {value}."
"""How `chatty_rows`' weaker expert words its answer: the value inside a sentence, as an instruct model
would write it; the program prints it as it is and `correct_answer` (exactly the value) scores it 0."""


def expert_script(keys: str = "ABDEFGHJ") -> ServerScript:
    """The scripted expert: turn 0 calls ``lookup`` with the key the task names, turn 1 answers with
    the tool's reply (the last message), anything else gets an empty answer."""
    calls = [
        ScriptedReply(turn=0, match=f"^look up {k}$",
                      tool_calls=[ScriptedToolCall(name="lookup", arguments=json.dumps({"key": k}))])
        for k in keys
    ]
    return ServerScript(model="expert", replies=[*calls, ScriptedReply(turn=1, content="{last_message}"),
                                                 ScriptedReply(content="")])


def program_tools() -> list[dict[str, Any]]:
    """The tool schemas the shipped program sends with every call (its module-level ``TOOLS``)."""
    from agent_lookup.lookup_agent import TOOLS  # imports openai, as the program does

    return json.loads(json.dumps(TOOLS))


def _result_dict(result: Any) -> dict[str, Any]:
    if isinstance(result, dict):
        return result
    return result.model_dump(mode="json")  # a RolloutResult


def expert_rows(results: Iterable[Any], tools: list[dict[str, Any]] | None = None,
                min_reward: float = 1.0) -> list[dict[str, Any]]:
    """SFT rows (``messages`` = prompt + completion, ``tools``) of the results that ended without an
    error with ``reward >= min_reward``; ``tools`` defaults to the shipped program's."""
    tools = program_tools() if tools is None else tools
    rows = []
    for r in map(_result_dict, results):
        if r.get("error") or float(r.get("reward", 0.0)) < min_reward:
            continue
        prompt, completion = r.get("prompt"), r.get("completion")
        if not isinstance(prompt, list) or not isinstance(completion, list):
            raise ValueError("expert_rows needs chat results (prompt and completion as message lists), "
                             f"got {type(prompt).__name__} / {type(completion).__name__}")
        rows.append({"messages": [*prompt, *completion], "tools": tools})
    return rows


def chatty_rows(rows: Iterable[dict[str, Any]], share: float, seed: int = 0,
                template: str = CHATTY_ANSWER) -> list[dict[str, Any]]:
    """A weaker, chatty expert's episodes: a seeded ``share`` of ``rows`` answer with ``template``
    (``{key}``, ``{value}``) in place of the bare value.

    Why: it makes a warm-up that learns everything the task needs (the call, the key, copying the
    tool's reply) yet scores about ``1 - share`` at the end, because the program prints the chatty
    sentence as it is and the grader wants the value alone. What is left for RL through the program
    is one choice the expert rows cannot settle, which `examples/configs/agent_program_rl.toml` measures.
    Each row must be an `expert_rows` row: user, tool call, tool result, answer.
    """
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"share must be between 0 and 1, got {share}")
    rng = random.Random(seed)
    out = []
    for row in rows:
        messages = [dict(m) for m in row["messages"]]
        answer = messages[-1]
        if answer.get("role") != "assistant" or answer.get("tool_calls"):
            raise ValueError("chatty_rows needs rows that end on the assistant's answer (expert_rows' rows)")
        if rng.random() < share:
            key = json.loads(messages[1]["tool_calls"][0]["function"]["arguments"])["key"]
            answer["content"] = template.format(key=key, value=answer["content"])
        out.append({**row, "messages": messages})
    return out
