"""Seeded generation of the texts to reverse.

Texts are built from a bundled word list rather than downloaded, so the environment
works offline and every seed gives the same dataset on every machine.
"""

from __future__ import annotations

import random
from functools import cache
from importlib.resources import files
from typing import Any

__all__ = ["load_words", "make_examples", "make_text"]


@cache
def load_words() -> tuple[str, ...]:
    """The bundled common-word list (read once; a tuple so the cache cannot be mutated)."""
    text = files(__package__).joinpath("words.txt").read_text(encoding="utf-8")
    words = [line.strip() for line in text.splitlines()]
    return tuple(w for w in words if w and not w.startswith("#"))


def make_text(rng: random.Random, words: tuple[str, ...], min_words: int, max_words: int) -> str:
    """One lowercase sentence of ``min_words..max_words`` words, first letter capitalised, ending in a period.

    Capital letter and period give the reversal a visible start and end, so an answer
    that only reverses the word order (not the characters) is easy to tell apart.
    """
    n = rng.randint(min_words, max_words)
    sentence = " ".join(rng.choice(words) for _ in range(n))
    return sentence[0].upper() + sentence[1:] + "."


def make_examples(
    n: int,
    rng: random.Random,
    min_words: int,
    max_words: int,
    exclude: set[str] | None = None,
) -> list[dict[str, Any]]:
    """``n`` distinct examples ``{"question": text, "answer": reversed text}``.

    Texts in ``exclude`` (e.g. the training texts when building the eval split) are
    skipped, so evaluation never scores memorised training items. Found texts are
    added to ``exclude``.
    """
    words = load_words()
    seen = exclude if exclude is not None else set()
    rows: list[dict[str, Any]] = []
    attempts = 0
    while len(rows) < n:
        attempts += 1
        if attempts > 100 * n + 1000:
            raise ValueError(
                f"could not generate {n} distinct texts with {min_words}-{max_words} words; "
                "raise max_words or ask for fewer examples"
            )
        text = make_text(rng, words, min_words, max_words)
        if text in seen:
            continue
        seen.add(text)
        rows.append({"question": text, "answer": text[::-1], "info": {"num_words": len(text.split())}})
    return rows
