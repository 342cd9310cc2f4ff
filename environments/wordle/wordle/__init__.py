"""wordle: guess a secret five-letter word from per-letter feedback, over several turns.

The model writes ``<think>...</think>`` then ``<guess>word</guess>``; the environment
answers with G (right letter, right place), Y (in the word, elsewhere) or X (absent)
per letter, until the word is found or the guesses run out.
"""

from __future__ import annotations

import random
from functools import cache
from importlib.resources import files
from typing import Any

import verifiers as vf
from wordle.env import WordleEnv
from wordle.game import WORD_LENGTH, GameRecord, read_guess, replay, score_guess
from wordle.rewards import correct_answer, efficiency, partial_credit

__all__ = [
    "SYSTEM_PROMPT",
    "GameRecord",
    "WordleEnv",
    "correct_answer",
    "efficiency",
    "load_environment",
    "load_words",
    "partial_credit",
    "read_guess",
    "replay",
    "score_guess",
]

SYSTEM_PROMPT = """You are playing Wordle. Find the secret five-letter English word.

After each guess you get one mark per letter:
G = the letter is in the word and in the right place,
Y = the letter is in the word but in a different place,
X = the letter is not in the word (or not as many times as you used it).

Every reply counts as one guess, including invalid ones. In each reply, think inside \
<think>...</think>, then give exactly one five-letter word inside <guess>...</guess>."""


@cache
def load_words() -> tuple[str, ...]:
    """The bundled list of five-letter words (read once)."""
    text = files(__package__).joinpath("words.txt").read_text(encoding="utf-8")
    words = (line.strip().lower() for line in text.splitlines())
    return tuple(w for w in words if w and not w.startswith("#"))


def _rows(secrets: list[str], max_guesses: int) -> list[dict[str, Any]]:
    question = (
        f"Guess the secret {WORD_LENGTH}-letter word. You have {max_guesses} guesses. "
        "Reply with your first guess."
    )
    return [{"question": question, "answer": w, "info": {"max_guesses": max_guesses}} for w in secrets]


def load_environment(
    num_train_examples: int = 1000,
    num_eval_examples: int = 100,
    seed: int = 0,
    max_guesses: int = 6,
    system_prompt: str = SYSTEM_PROMPT,
    **kwargs: Any,
) -> vf.Environment:
    """Build the wordle environment.

    The bundled words are shuffled with ``seed``; the first ``num_eval_examples`` are the
    evaluation secrets (each once) and training cycles through the rest, so no
    evaluation word is ever trained on.

    Args:
        num_train_examples: Number of training games (0: evaluation only); secrets repeat
            when this exceeds the training words.
        num_eval_examples: Number of evaluation games, at most the number of words minus one.
        seed: Seed of the shuffle.
        max_guesses: Guesses per game, invalid ones included.
        system_prompt: The rules and answer format shown to the model.
        **kwargs: Passed on to ``WordleEnv`` / ``vf.MultiTurnEnv``.
    """
    words = list(load_words())
    if num_train_examples < 0 or num_eval_examples < 0:
        raise ValueError("num_train_examples and num_eval_examples must be >= 0")
    if num_train_examples == 0 and num_eval_examples == 0:
        raise ValueError("ask for at least one training or evaluation example")
    if num_eval_examples >= len(words):
        raise ValueError(f"num_eval_examples must be below the {len(words)} bundled words")
    if max_guesses < 1:
        raise ValueError(f"max_guesses must be at least 1, got {max_guesses}")
    rng = random.Random(seed)
    rng.shuffle(words)
    eval_words, train_pool = words[:num_eval_examples], words[num_eval_examples:]
    train_words: list[str] = []
    while len(train_words) < num_train_examples:
        cycle = train_pool[:]
        rng.shuffle(cycle)
        train_words += cycle[: num_train_examples - len(train_words)]

    parser = vf.XMLParser(["think", "guess"], answer_field="guess")
    rubric = vf.Rubric(
        funcs=[correct_answer, partial_credit, efficiency, parser.get_format_reward_func()],
        weights=[1.0, 0.5, 0.5, 0.2],
        parser=parser,
    )
    return WordleEnv(
        max_guesses=max_guesses,
        dataset=_rows(train_words, max_guesses) or None,
        eval_dataset=_rows(eval_words, max_guesses) or None,
        system_prompt=system_prompt,
        parser=parser,
        rubric=rubric,
        **kwargs,
    )
