"""ThinkParser: for reasoning models that write ``<think>...</think>`` before answering.

Only the text after the reasoning is the answer; scoring the reasoning would reward
whatever the model happened to mention while thinking.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from verifiers.parsers.parser import Messages, Parser, RewardFunc, _mean, _named, identity, message_text

__all__ = ["ThinkParser"]

_OPEN = "<think>"
_CLOSE = "</think>"


class ThinkParser(Parser):
    """Parser that drops a leading ``<think>...</think>`` block, then applies ``extract_fn``."""

    def __init__(self, extract_fn: Callable[[str], Any] = identity) -> None:
        super().__init__(extract_fn)

    def parse(self, text: str) -> Any:
        """Text after the last ``</think>`` (stripped), passed through ``extract_fn``.

        Without ``</think>`` the answer is ``""`` (``extract_fn("")``), as in verifiers
        0.1.x: a reasoning that never finished has no answer, and a model that skipped
        the reasoning is not rewarded for it. For servers that strip the reasoning
        themselves, use `Parser` instead.
        """
        if _CLOSE not in text:
            return self.extract_fn("")
        return self.extract_fn(text.rsplit(_CLOSE, 1)[1].strip())

    @staticmethod
    def score_format(text: str) -> float:
        """1.0 iff the text is exactly ``<think>...</think>`` followed by a non-empty answer.

        That is: it starts (after whitespace) with ``<think>``, contains exactly one
        ``<think>`` and exactly one ``</think>``, and has non-blank text after
        ``</think>``. Anything else scores 0.0.
        """
        stripped = text.lstrip()
        if not stripped.startswith(_OPEN):
            return 0.0
        if stripped.count(_OPEN) != 1 or stripped.count(_CLOSE) != 1:
            return 0.0
        return 1.0 if stripped.split(_CLOSE, 1)[1].strip() else 0.0

    def get_format_reward_func(self) -> RewardFunc:
        """Reward function: mean :meth:`score_format` over assistant turns (0.0 if none)."""

        def format_reward_func(completion: Messages, **kwargs: Any) -> float:
            messages = self.get_assistant_messages(completion)
            return _mean([self.score_format(message_text(m)) for m in messages])

        return _named(format_reward_func, "format_reward_func")
