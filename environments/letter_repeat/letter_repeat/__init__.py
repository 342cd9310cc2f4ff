"""letter-repeat: answer with the letter the user names, and nothing else.

The task the Quickstart trains on. A model with random weights scores about 0 (it emits
characters uniformly), yet the reward is dense: each character of the reply that equals the
requested letter counts, so group-relative advantages have signal from the first step and a
tiny model learns to copy the letter (and to stop) within a few hundred GRPO steps on a CPU.
Real models solve it at once, which makes it a handy smoke test of a training setup.
"""

from __future__ import annotations

import random
from typing import Any

import verifiers as vf

__all__ = ["letter_fraction", "load_environment", "make_rows", "stops_short"]


def letter_fraction(completion: vf.Messages, answer: str) -> float:
    """Share of the reply's characters (whitespace ignored) that are the requested letter; 0 when empty.

    The reply is read as a user reads it (``vf.reply_text``): a sampled markup token such as
    ``<tool_call>`` counts for nothing, where its eleven characters would otherwise pay 1/11
    for an ``a`` or a ``c`` for one token, a hack a random model finds before the letter.
    """
    chars = [c for c in vf.reply_text(completion) if not c.isspace()]
    if not chars:
        return 0.0
    return sum(c == answer for c in chars) / len(chars)


def stops_short(completion: vf.Messages, answer: str) -> float:
    """1.0 when the reply is exactly the letter (a zero-weight metric: did the model learn to stop?)."""
    return float(vf.reply_text(completion).strip() == answer)


def make_rows(n: int, letters: str, rng: random.Random) -> list[dict[str, str]]:
    return [{"question": f"Say {c}", "answer": c} for c in (rng.choice(letters) for _ in range(n))]


def load_environment(
    letters: str = "abcd",
    num_train_examples: int = 512,
    num_eval_examples: int = 64,
    seed: int = 0,
    system_prompt: str | None = None,
    **kwargs: Any,
) -> vf.Environment:
    """Build the environment.

    Args:
        letters: The letters questions are drawn from (more letters: a harder task).
        num_train_examples: Size of the training split.
        num_eval_examples: Size of the evaluation split.
        seed: Seed of the question generator.
        system_prompt: Optional system message.
        **kwargs: Passed on to ``vf.SingleTurnEnv``.
    """
    if not letters or any(len(c.encode()) != 1 or c.isspace() for c in letters):
        raise ValueError(f"letters must be non-empty printable ASCII characters, got {letters!r}")
    if num_train_examples < 1 or num_eval_examples < 0:
        raise ValueError("need num_train_examples >= 1 and num_eval_examples >= 0")
    rng = random.Random(seed)
    rubric = vf.Rubric(funcs=[letter_fraction, stops_short], weights=[1.0, 0.0])
    return vf.SingleTurnEnv(
        dataset=make_rows(num_train_examples, letters, rng),
        eval_dataset=make_rows(num_eval_examples, letters, rng) or None,
        system_prompt=system_prompt,
        rubric=rubric,
        **kwargs,
    )
