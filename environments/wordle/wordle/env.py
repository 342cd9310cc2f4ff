"""WordleEnv: the game loop on top of MultiTurnEnv.

Every model reply is one attempt. The environment answers each with per-letter
feedback, and ends the game itself with a final message (win or loss), so that the
last message of the completion tells how the game ended and ``state`` holds the result.
"""

from __future__ import annotations

from typing import Any

import verifiers as vf
from verifiers.parsers.parser import message_text
from verifiers.types import Message, Messages, State
from wordle.game import read_guess, score_guess

__all__ = ["WordleEnv"]


class WordleEnv(vf.MultiTurnEnv):
    """Wordle against ``answer``; ``state`` gets ``guesses``, ``feedback``, ``solved`` and ``final_feedback``."""

    def __init__(self, max_guesses: int = 6, **kwargs: Any) -> None:
        # The game ends itself (game_over) after its final feedback; max_turns is only a
        # backstop, one above max_guesses so that it can never cut off that feedback.
        kwargs.pop("max_turns", None)
        super().__init__(max_turns=max_guesses + 1, **kwargs)
        self.max_guesses = max_guesses

    async def setup_state(self, state: State, **kwargs: Any) -> State:
        state.update(
            secret=str(state["answer"]).strip().lower(),
            guesses=[],
            feedback=[],
            attempts=0,
            invalid_guesses=0,
            solved=False,
            game_over=False,
            final_feedback=None,
        )
        return state

    async def is_completed(self, messages: Messages, state: State, **kwargs: Any) -> bool:
        return bool(state.get("game_over"))

    async def env_response(self, messages: Messages, state: State, **kwargs: Any) -> list[Message]:
        if isinstance(messages, str):
            raise vf.EnvError("WordleEnv needs message_type='chat'")
        secret: str = state["secret"]
        state["attempts"] += 1
        attempt = state["attempts"]
        remaining = self.max_guesses - attempt
        guess, problem = read_guess(message_text(messages[-1]), self.parser)
        if guess is None:
            state["invalid_guesses"] += 1
            lines = [f"Guess {attempt}/{self.max_guesses} is invalid: {problem} It still counts as a guess."]
        else:
            feedback = score_guess(guess, secret)
            state["guesses"].append(guess)
            state["feedback"].append(feedback)
            lines = [
                f"Guess {attempt}/{self.max_guesses}: {' '.join(guess.upper())}",
                f"Feedback:  {' '.join(feedback)}",
            ]
            if guess == secret:
                state["solved"] = True
                lines.append(f"Correct! You found {secret.upper()} in {attempt} {_guesses(attempt)}.")
        if not state["solved"]:
            if remaining <= 0:
                lines.append(f"No guesses left. The word was {secret.upper()}.")
            else:
                lines.append(f"You have {remaining} {_guesses(remaining)} left.")
        text = "\n".join(lines)
        if state["solved"] or remaining <= 0:
            state["game_over"] = True
            state["final_feedback"] = text
        return [{"role": "user", "content": text}]


def _guesses(n: int) -> str:
    return "guess" if n == 1 else "guesses"
