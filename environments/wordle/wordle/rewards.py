"""Wordle reward functions, computed after the game by replaying the transcript.

``correct_answer`` is the goal. ``partial_credit`` gives a failed game a signal that
grows with how close its best guess came, and ``efficiency`` separates fast wins from
slow ones; each applies only where the other cannot, so a win is always worth more
than any loss.
"""

from __future__ import annotations

from typing import Any

from wordle.game import GREEN, YELLOW, GameRecord, replay

__all__ = ["DEFAULT_MAX_GUESSES", "correct_answer", "efficiency", "partial_credit"]

DEFAULT_MAX_GUESSES = 6


def _record(completion: Any, answer: str, info: dict[str, Any], parser: Any) -> GameRecord:
    return replay(completion, answer, parser, int(info.get("max_guesses", DEFAULT_MAX_GUESSES)))


def correct_answer(completion: Any, answer: str, info: dict[str, Any], parser: Any) -> float:
    """1.0 if the word was found within the allowed guesses."""
    return 1.0 if _record(completion, answer, info, parser).solved else 0.0


def partial_credit(completion: Any, answer: str, info: dict[str, Any], parser: Any) -> float:
    """For a lost game, the best guess's ``0.2 * greens + 0.1 * yellows`` (at most 1); 0.0 for a win."""
    record = _record(completion, answer, info, parser)
    if record.solved:
        return 0.0
    best = 0.0
    for feedback in record.feedback:
        best = max(best, 0.2 * feedback.count(GREEN) + 0.1 * feedback.count(YELLOW))
    return min(1.0, best)


def efficiency(completion: Any, answer: str, info: dict[str, Any], parser: Any) -> float:
    """For a win on attempt k of n: ``(n - k + 1) / n`` (1.0 for a first-guess win); 0.0 for a loss.

    Invalid replies count as attempts, as they do in the game.
    """
    max_guesses = int(info.get("max_guesses", DEFAULT_MAX_GUESSES))
    record = _record(completion, answer, info, parser)
    if record.solved_at is None:
        return 0.0
    return (max_guesses - record.solved_at + 1) / max_guesses
