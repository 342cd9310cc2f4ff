"""agent-lookup: key-lookup played by an agent program, the model reached only through its SDK calls.

The task is key-lookup's (a fresh table of one-letter keys per example, hidden from the model;
``look up E`` must be answered with E's value), but nothing here drives the conversation: each
rollout runs ``lookup_agent.py`` (an OpenAI SDK tool loop with one tool, ``lookup``, over the
table it is given in ``VF_INFO``) as a subprocess under `vf.AgentEnv`. The program's model calls
go through the interception gateway, which records their token ids for training; the reward is
whether the answer the program printed is the value.

The program offers ``lookup`` with exactly key-lookup's schema and sends no system prompt, so a
tiny model sees the same prompt as in key-lookup and episodes of either environment are
interchangeable as expert data. `expert_script` makes a scripted server play the expert through
the program (`examples/make_agent_lookup_expert.py` records the episodes with vf-eval -s) and
`expert_rows` turns the saved results into SFT rows.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import verifiers as vf
from agent_lookup.expert import chatty_rows, expert_rows, expert_script, program_tools
from agent_lookup.rewards import correct_answer, model_calls, right_key_called, tool_call_ran

__all__ = [
    "PROGRAM",
    "chatty_rows",
    "correct_answer",
    "expert_rows",
    "expert_script",
    "load_environment",
    "make_rows",
    "model_calls",
    "program_tools",
    "right_key_called",
    "tool_call_ran",
]

PROGRAM = Path(__file__).with_name("lookup_agent.py")
"""The agent program each rollout runs (an OpenAI SDK tool loop; docs/agents.md runs it too)."""


def make_rows(n: int, keys: str, num_keys: int, digits: int, rng: random.Random) -> list[dict[str, Any]]:
    """``n`` rows, each with its own table in ``info`` (the program's ``VF_INFO``) and the value as answer."""
    rows = []
    for _ in range(n):
        table = {k: "".join(rng.choice("0123456789") for _ in range(digits)) for k in rng.sample(keys, num_keys)}
        key = rng.choice(sorted(table))
        rows.append({"question": f"look up {key}", "answer": table[key], "info": {"table": table, "key": key}})
    return rows


def load_environment(
    keys: str = "ABDEFGHJ",
    num_keys: int = 4,
    digits: int = 3,
    num_train_examples: int = 2000,
    num_eval_examples: int = 100,
    seed: int = 0,
    max_calls: int = 3,
    timeout_s: float = 60.0,
    program: str | None = None,
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
        max_calls: Model calls the program may make per rollout (a successful one makes 2).
        timeout_s: Wall-clock bound of one run of the program.
        program: Path of another agent program to run instead of the shipped ``lookup_agent.py``.
        **kwargs: Passed on to ``vf.AgentEnv`` (e.g. ``env``, ``isolation``).
    """
    if len(set(keys)) != len(keys) or any(len(k.encode()) != 1 or not k.isalpha() for k in keys):
        raise ValueError(f"keys must be distinct ASCII letters, got {keys!r}")
    if not 1 <= num_keys <= len(keys):
        raise ValueError(f"num_keys must be between 1 and len(keys)={len(keys)}, got {num_keys}")
    if digits < 1:
        raise ValueError(f"digits must be at least 1, got {digits}")
    if num_train_examples < 1 or num_eval_examples < 0:
        raise ValueError("need num_train_examples >= 1 and num_eval_examples >= 0")
    if max_calls < 2:
        raise ValueError(f"max_calls must be at least 2 (one lookup, one answer), got {max_calls}")
    path = Path(program) if program is not None else PROGRAM
    if not path.is_file():
        raise ValueError(f"program {str(path)!r} does not exist: pass program= the path of an agent program")
    rng = random.Random(seed)
    rubric = vf.Rubric(funcs=[correct_answer, right_key_called, tool_call_ran, model_calls],
                       weights=[1.0, 0.0, 0.0, 0.0])
    return vf.AgentEnv(
        command=[sys.executable, str(path)],
        dataset=make_rows(num_train_examples, keys, num_keys, digits, rng),
        eval_dataset=make_rows(num_eval_examples, keys, num_keys, digits, rng) or None,
        rubric=rubric,
        # The program's own bound on its loop; the gateway's max_calls enforces it as well.
        env={"AGENT_MAX_CALLS": str(max_calls)},
        max_calls=max_calls,
        timeout_s=timeout_s,
        **kwargs,
    )
