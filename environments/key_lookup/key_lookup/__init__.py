"""key-lookup: answer with the value stored under a key, which only the ``lookup`` tool can read.

Each example draws a fresh table (a few one-letter keys, each with a random number) that the
model never sees: the prompt names only the key. The one way to the answer is to call
``lookup`` with that key, read the number in the tool's reply and answer with it, so a
successful episode is at least two model turns (the call, then the answer) and the reward
depends on what happened across them. A guess is right with probability 10^-digits.

Everything is short on purpose (one-letter keys, a few digits, a terse prompt) so that a
randomly initialised tiny model with a character-level tokenizer can learn the whole
multi-turn path on a laptop CPU: examples/configs/agentic.toml trains it.
"""

from __future__ import annotations

import random
from typing import Any

import verifiers as vf
from key_lookup.rewards import correct_answer, model_turns, right_key_called, tool_call_ran

__all__ = [
    "correct_answer",
    "expert_episode",
    "load_environment",
    "lookup",
    "make_rows",
    "model_turns",
    "right_key_called",
    "tool_call_ran",
]


def lookup(key: str, table: dict[str, str]) -> str:
    """read the value of a key

    Args:
        key: the key, one letter
        table: This episode's table (filled in by the environment; the model never sees it).
    """
    if key not in table:
        raise KeyError(f"no key {key!r}; the keys are {', '.join(sorted(table))}")
    return table[key]


class KeyLookupEnv(vf.StatefulToolEnv):
    """A StatefulToolEnv whose ``lookup`` tool reads the episode's own table from ``info``."""

    def update_tool_args(self, tool_args: dict[str, Any], messages: vf.Messages, state: vf.State,
                         **kwargs: Any) -> dict[str, Any]:
        return {**tool_args, "table": dict(state["info"]["table"])}


def make_rows(n: int, keys: str, num_keys: int, digits: int, rng: random.Random) -> list[dict[str, Any]]:
    """``n`` dataset rows, each with its own table in ``info`` and the asked key's value as answer."""
    rows = []
    for _ in range(n):
        table = {k: "".join(rng.choice("0123456789") for _ in range(digits)) for k in rng.sample(keys, num_keys)}
        key = rng.choice(sorted(table))
        rows.append({"question": f"look up {key}", "answer": table[key], "info": {"table": table, "key": key}})
    return rows


def expert_episode(row: dict[str, Any], tools: list[dict[str, Any]]) -> dict[str, Any]:
    """A correct two-turn episode for ``row`` as an SFT chat row (``messages`` + ``tools``), for MIX.

    The assistant turns are written the way the model emits them, so the chat template renders
    them to exactly the tokens a successful rollout samples.
    """
    key = row["info"]["key"]
    call = {"id": "call_0", "type": "function", "function": {"name": "lookup", "arguments": {"key": key}}}
    return {
        "messages": [
            {"role": "user", "content": row["question"]},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_0", "content": row["info"]["table"][key]},
            {"role": "assistant", "content": row["answer"]},
        ],
        "tools": tools,
    }


def load_environment(
    keys: str = "ABDEFGHJ",
    num_keys: int = 4,
    digits: int = 3,
    num_train_examples: int = 2000,
    num_eval_examples: int = 100,
    seed: int = 0,
    max_turns: int = 3,
    call_credit: float = 0.0,
    **kwargs: Any,
) -> vf.Environment:
    """Build the environment.

    Args:
        keys: Letters the tables' keys are drawn from.
        num_keys: Keys per table (the asked one and decoys).
        digits: Digits of each value (a guess succeeds with probability 10^-digits).
        num_train_examples: Size of the training split.
        num_eval_examples: Size of the evaluation split (0: none).
        seed: Seed of the table generator.
        max_turns: Most model turns per episode (a successful one takes 2).
        call_credit: Reward for calling ``lookup`` with the asked key, added to the answer's 1.0.
        **kwargs: Passed on to ``vf.StatefulToolEnv`` (e.g. ``system_prompt``).
    """
    if len(set(keys)) != len(keys) or any(len(k.encode()) != 1 or not k.isalpha() for k in keys):
        raise ValueError(f"keys must be distinct ASCII letters, got {keys!r}")
    if not 1 <= num_keys <= len(keys):
        raise ValueError(f"num_keys must be between 1 and len(keys)={len(keys)}, got {num_keys}")
    if digits < 1:
        raise ValueError(f"digits must be at least 1, got {digits}")
    if num_train_examples < 1 or num_eval_examples < 0:
        raise ValueError("need num_train_examples >= 1 and num_eval_examples >= 0")
    if max_turns < 2:
        raise ValueError(f"max_turns must be at least 2 (one call, one answer), got {max_turns}")
    if call_credit < 0:
        raise ValueError(f"call_credit must be >= 0, got {call_credit}")
    rng = random.Random(seed)
    rubric = vf.Rubric(
        funcs=[correct_answer, right_key_called, tool_call_ran, model_turns],
        weights=[1.0, call_credit, 0.0, 0.0],
    )
    env = KeyLookupEnv(
        max_turns=max_turns,
        dataset=make_rows(num_train_examples, keys, num_keys, digits, rng),
        eval_dataset=make_rows(num_eval_examples, keys, num_keys, digits, rng) or None,
        rubric=rubric,
        **kwargs,
    )
    env.add_tool(lookup, args_to_skip=["table"])
    return env
