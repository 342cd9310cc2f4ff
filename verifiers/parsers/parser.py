"""Base parser: turns a model completion into the answer a rubric scores.

A *completion* is either a plain string (completion mode) or a list of OpenAI chat
message dicts (chat mode). Message ``content`` may be a string, ``None`` (e.g. an
assistant turn that only carries tool calls) or a list of content parts; every helper
here accepts all three so that environments never have to special-case them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

Message = dict[str, Any]
Messages = str | list[Message]
RewardFunc = Callable[..., float]

__all__ = [
    "Message",
    "Messages",
    "Parser",
    "RewardFunc",
    "extract_boxed_answer",
    "identity",
    "message_text",
]


def identity(text: str) -> str:
    """Return ``text`` unchanged.

    The default ``extract_fn``. A module-level function rather than a lambda so that
    parsers stay picklable (environments are shipped to worker processes).
    """
    return text


def _field(obj: Any, key: str) -> Any:
    """Read ``key`` from a dict-like message/part, or from an object attribute.

    Lets callers pass OpenAI SDK objects (pydantic models) as well as plain dicts.
    """
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


def message_text(message: Any) -> str:
    """Return the text of a message's ``content``, whatever shape it has.

    ``None`` becomes ``""``; a list of parts is reduced to the concatenation of its
    ``text`` parts (non-text parts such as images are ignored), which is how the
    OpenAI API itself reads multi-part content.
    """
    content = _field(message, "content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    pieces: list[str] = []
    for part in content:
        if isinstance(part, str):
            pieces.append(part)
        elif _field(part, "type") in (None, "text"):
            text = _field(part, "text")
            if isinstance(text, str):
                pieces.append(text)
    return "".join(pieces)


def _mean(scores: list[float]) -> float:
    return sum(scores) / len(scores) if scores else 0.0


def _named(func: RewardFunc, name: str) -> RewardFunc:
    """Give a reward function a stable name: rubrics report metrics under ``__name__``."""
    func.__name__ = name
    func.__qualname__ = name
    return func


class Parser:
    """Identity parser; the base class of every parser.

    ``extract_fn`` post-processes the text (e.g. :func:`extract_boxed_answer` for math
    tasks), so simple environments need no subclass at all.
    """

    def __init__(self, extract_fn: Callable[[str], Any] = identity) -> None:
        self.extract_fn = extract_fn
        # 0.1.x parsers had ``self.logger`` and their subclasses log through it (loggers pickle by name)
        self.logger = logging.getLogger(f"verifiers.parsers.{type(self).__name__}")

    def parse(self, text: str) -> Any:
        """Parse one message's text. The base class only applies ``extract_fn``."""
        return self.extract_fn(text)

    # -- message selection ------------------------------------------------------------
    def _messages_with_role(self, completion: Messages, role: str) -> list[Message]:
        if isinstance(completion, str):
            # Completion mode: the whole string is the model's single turn.
            return [{"role": "assistant", "content": completion}] if role == "assistant" else []
        return [m for m in completion if _field(m, "role") == role]

    def get_assistant_messages(self, completion: Messages) -> list[Message]:
        """Assistant messages of a completion; a string counts as one assistant message.

        Treating a string as a single assistant turn lets reward functions handle both
        completion and chat mode with one code path.
        """
        return self._messages_with_role(completion, "assistant")

    def get_tool_messages(self, completion: Messages) -> list[Message]:
        """Tool-result messages of a chat completion (none for a string)."""
        return self._messages_with_role(completion, "tool")

    def get_user_messages(self, completion: Messages) -> list[Message]:
        """User messages of a chat completion (none for a string)."""
        return self._messages_with_role(completion, "user")

    def get_system_messages(self, completion: Messages) -> list[Message]:
        """System messages of a chat completion (none for a string)."""
        return self._messages_with_role(completion, "system")

    # -- answers and rewards ----------------------------------------------------------
    def parse_answer(self, completion: Messages) -> str | None:
        """The answer a rubric should score.

        A string is parsed as is; for chat, the last assistant message's text is parsed.
        ``None`` when the chat has no assistant message at all.
        """
        if isinstance(completion, str):
            return self.parse(completion)
        assistant = self.get_assistant_messages(completion)
        if not assistant:
            return None
        return self.parse(message_text(assistant[-1]))

    def get_format_reward_func(self) -> RewardFunc:
        """Reward function: 1.0 if any assistant turn has non-blank text, else 0.0.

        The base parser imposes no format, so the only failure it can detect is a
        model that said nothing.
        """

        def format_reward_func(completion: Messages, **kwargs: Any) -> float:
            texts = (message_text(m) for m in self.get_assistant_messages(completion))
            return 1.0 if any(t.strip() for t in texts) else 0.0

        return _named(format_reward_func, "format_reward_func")


def extract_boxed_answer(text: str) -> str:
    r"""Content of the last ``\boxed{...}`` in ``text``; ``text`` unchanged when there is none.

    Returning the text itself (as verifiers 0.1.x does) lets this be a parser's
    ``extract_fn`` for answers given with or without a box. When the last box is not
    closed (typically a truncated generation) the text is returned unchanged too: an
    earlier box the model moved past is not its answer. Braces are matched with a depth
    counter so nested groups survive (``\boxed{\frac{1}{2}}`` gives ``\frac{1}{2}``),
    LaTeX-escaped braces (``\{``, ``\}``) are not counted, and the content is stripped.
    """
    marker = "\\boxed"
    last: str | None = None
    pos = 0
    n = len(text)
    while True:
        start = text.find(marker, pos)
        if start < 0:
            return text if last is None else last
        i = start + len(marker)
        if i < n and (text[i].isalpha()):
            # e.g. \boxedfoo: a different command, not a box.
            pos = i
            continue
        while i < n and text[i].isspace():
            i += 1
        if i >= n or text[i] != "{":
            pos = i
            continue
        depth = 0
        body_start = i + 1
        end = -1
        while i < n:
            ch = text[i]
            if ch == "\\":
                i += 2  # skip the escaped character, braces included
                continue
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    end = i
                    break
            i += 1
        if end < 0:
            return text
        last = text[body_start:end].strip()
        pos = end + 1
