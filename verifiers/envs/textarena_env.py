"""TextArenaEnv (0.1.x path ``verifiers.envs.textarena_env``): TextArena games as multi-turn environments.

Needs the optional ``textarena`` package (the ``textarena`` extra: ``pip install -e ".[textarena]"`` in a clone);
this module imports without it and the constructor raises a `ConfigError` saying so.
As upstream, each dataset row is one game: the question is the game's opening
observation, the model's move is ``parser.parse_answer`` of its turn (default
``XMLParser(["think", "guess"], answer_field="guess")``), each step's observation
(through ``feedback_fn``) is the next user message, and the episode ends when the game
says it is done. Word games (those with a ``word_list``, e.g. ``Wordle-v0``) get a
seeded secret word per row as ``answer``, set into the game as upstream did. Other
single-player games (e.g. ``GuessTheNumber-v0``, an extension over upstream) are
seeded per row instead: ``info["seed"]``, used again for the game's reset.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable
from typing import Any

from verifiers.envs.multiturn_env import MultiTurnEnv
from verifiers.errors import ConfigError
from verifiers.install_hint import install_command
from verifiers.parsers.parser import identity
from verifiers.parsers.xml_parser import XMLParser
from verifiers.rubrics.rubric import Rubric
from verifiers.types import Message, Messages, State

__all__ = ["TextArenaEnv"]



def _import_textarena() -> Any:
    try:
        import textarena
    except ImportError as exc:
        raise ConfigError(
            f"TextArenaEnv needs the 'textarena' package, which is not installed: {install_command('textarena')} "
            "(or: pip install textarena)"
        ) from exc
    return textarena


def _make_game(ta: Any, game: str) -> Any:
    try:
        return ta.make(env_id=game)
    except LookupError as exc:  # nltk corpora that word games need and could not download
        missing = next((line.strip() for line in str(exc).splitlines() if "Resource" in line), "a corpus")
        raise ConfigError(
            f"TextArena game {game!r} needs NLTK data that is not installed ({missing}). "
            "Install it once with network access: python -m nltk.downloader words averaged_perceptron_tagger_eng"
        ) from exc


class TextArenaEnv(MultiTurnEnv):
    """A single-player TextArena game; rows are games, turns are moves."""

    def __init__(
        self,
        game: str = "Wordle-v0",
        num_train_examples: int = 1000,
        num_eval_examples: int = 0,
        system_prompt: str | None = None,
        parser: XMLParser | None = None,
        rubric: Rubric | None = None,
        feedback_fn: Callable[[str], str] = identity,
        seed: int = 0,
        **kwargs: Any,
    ) -> None:
        self._ta = _import_textarena()
        parser = parser or XMLParser(fields=["think", "guess"], answer_field="guess")
        self.game = game
        self.ta_env = _make_game(self._ta, game)
        self.num_train_examples = num_train_examples
        self.num_eval_examples = num_eval_examples
        self.seed = seed
        self.feedback_fn = feedback_fn
        dataset, eval_dataset = self.ta_to_hf()
        super().__init__(
            dataset=dataset,
            eval_dataset=eval_dataset,
            system_prompt=system_prompt,
            parser=parser,
            rubric=rubric,
            message_type="chat",
            **kwargs,
        )

    @property
    def is_word_game(self) -> bool:
        return hasattr(self.ta_env, "word_list")

    def ta_to_hf(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
        """Rows for ``num_train_examples`` + ``num_eval_examples`` games, seeded by ``seed``."""
        rng = random.Random(self.seed)
        rows: list[dict[str, Any]] = []
        total = self.num_train_examples + self.num_eval_examples
        if self.is_word_game:
            game = _make_game(self._ta, self.game)
            game.reset(num_players=1)
            _, question = game.get_observation()
            words = list(game.word_list)
            rows = [{"question": question, "answer": rng.choice(words)} for _ in range(total)]
        else:
            for i in range(total):
                game_seed = self.seed + i
                game = _make_game(self._ta, self.game)
                game.reset(num_players=1, seed=game_seed)
                _, question = game.get_observation()
                rows.append({"question": question, "answer": "", "info": {"seed": game_seed}})
        train, evaluation = rows[: self.num_train_examples], rows[self.num_train_examples :]
        return train, (evaluation or None)

    def _start_game(self, state: State) -> Any:
        game = copy.deepcopy(self.ta_env)
        if self.is_word_game:
            game.reset(num_players=1)
            game.state.game_state["secret_word"] = state["answer"]
        else:
            game.reset(num_players=1, seed=(state.get("info") or {}).get("seed", self.seed))
        return game

    async def is_completed(self, messages: Messages, state: State, **kwargs: Any) -> bool:
        if state.get("is_completed"):
            state.pop("ta_env", None)
            return True
        return await super().is_completed(messages, state, **kwargs)

    async def env_response(
        self, messages: Messages, state: State, **kwargs: Any
    ) -> tuple[list[Message], State]:
        game = state.get("ta_env")
        if game is None:
            game = state["ta_env"] = self._start_game(state)
        guess = self.parser.parse_answer(messages)
        done, _ = game.step(str(guess))
        state["is_completed"] = done
        _, observation = game.get_observation()
        return [{"role": "user", "content": str(self.feedback_fn(observation))}], state

    async def cleanup_state(self, state: State) -> None:
        await super().cleanup_state(state)
        state.pop("ta_env", None)
