"""Wordle rules: scoring a guess, reading a guess from a reply, and replaying a transcript.

The environment (while playing) and the reward functions (after the game) both go
through these functions, so the feedback the model saw and the score it gets can never
disagree. Replaying the transcript, rather than reading live state, also lets saved
results (which do not keep ``state``) be re-scored.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from verifiers.parsers.parser import message_text

__all__ = ["WORD_LENGTH", "GameRecord", "read_guess", "replay", "score_guess"]

WORD_LENGTH = 5
GREEN, YELLOW, ABSENT = "G", "Y", "X"


def score_guess(guess: str, secret: str) -> str:
    """Feedback string such as ``"GYXXG"`` for ``guess`` against ``secret`` (both lowercase).

    Repeated letters follow the real game: greens are settled first, then each
    remaining letter of the guess is yellow only while the secret still has an
    unmatched copy of it, left to right. So with secret ``abbey`` the guess ``bobby``
    scores ``YXGXG``: one ``b`` is green, one is yellow, the third is absent.
    """
    if len(guess) != len(secret):
        raise ValueError(f"guess {guess!r} and secret {secret!r} differ in length")
    marks = [ABSENT] * len(guess)
    unmatched: Counter[str] = Counter()
    for i, (g, s) in enumerate(zip(guess, secret, strict=True)):
        if g == s:
            marks[i] = GREEN
        else:
            unmatched[s] += 1
    for i, g in enumerate(guess):
        if marks[i] != GREEN and unmatched[g] > 0:
            marks[i] = YELLOW
            unmatched[g] -= 1
    return "".join(marks)


def read_guess(text: str, parser: Any) -> tuple[str | None, str | None]:
    """``(guess, None)`` for a valid guess in ``<guess>...</guess>``, else ``(None, why it is invalid)``.

    The reason is written for the model, which gets it back as the environment's reply.
    """
    raw = parser.parse(text).guess
    if raw is None:
        return None, "no <guess>...</guess> tag found. Write your guess as <guess>word</guess>."
    guess = raw.strip().lower()
    if not guess:
        return None, "the <guess> tag is empty. Put one five-letter word inside it."
    if not guess.isascii() or not guess.isalpha():
        return None, f"{raw.strip()!r} is not a word: use letters a-z only."
    if len(guess) != WORD_LENGTH:
        return None, f"{guess.upper()!r} has {len(guess)} letters; guesses must have exactly {WORD_LENGTH}."
    return guess, None


@dataclass(slots=True)
class GameRecord:
    """What happened in one game, as far as the transcript shows."""

    guesses: list[str] = field(default_factory=list)
    """Valid guesses, in order."""
    feedback: list[str] = field(default_factory=list)
    """Feedback of each valid guess."""
    attempts: int = 0
    """Replies that counted as a guess, valid or not."""
    solved_at: int | None = None
    """Attempt number of the correct guess (1-based), or None."""

    @property
    def solved(self) -> bool:
        return self.solved_at is not None


def replay(completion: Any, secret: str, parser: Any, max_guesses: int) -> GameRecord:
    """Replay the model's replies in ``completion`` against ``secret``, with the environment's rules."""
    record = GameRecord()
    if isinstance(completion, str):
        return record
    secret = secret.lower()
    for message in completion:
        if message.get("role") != "assistant" or record.solved or record.attempts >= max_guesses:
            continue
        record.attempts += 1
        guess, _ = read_guess(message_text(message), parser)
        if guess is None:
            continue
        record.guesses.append(guess)
        record.feedback.append(score_guess(guess, secret))
        if guess == secret:
            record.solved_at = record.attempts
    return record
