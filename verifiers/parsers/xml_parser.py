"""XMLParser: read ``<tag>...</tag>`` fields from a response and reward the format.

Models are asked to answer in a light XML layout such as
``<think>...</think>\\n<answer>...</answer>``. Parsing is forgiving (take what is there);
the format reward is strict, so that training pushes the model towards output the
parser can always read.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from verifiers.parsers.parser import Messages, Parser, RewardFunc, _mean, _named, identity, message_text

__all__ = ["XMLParser"]

_TAG_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*\Z")


class XMLParser(Parser):
    """Parser for responses made of XML-style fields.

    ``fields`` lists the expected tags in order. An entry may be a tuple of alternative
    tag names for one field, the first being canonical, e.g. ``("code", "answer")``:
    the model may write either, and the parsed result has one attribute per tag name
    (``.code`` and ``.answer``), set only for the tag actually used, so an environment
    can tell "ran code" from "answered". ``format`` writes the canonical tag.
    """

    def __init__(
        self,
        fields: list[str | tuple[str, ...]],
        answer_field: str = "answer",
        extract_fn: Callable[[str], Any] = identity,
    ) -> None:
        super().__init__(extract_fn)
        if not fields:
            raise ValueError("XMLParser needs at least one field")
        self._fields: list[tuple[str, tuple[str, ...]]] = []
        self._tag_to_field: dict[str, int] = {}
        for entry in fields:
            # 0.1.5's checks, exception types and first words: TypeError for a wrong type, ValueError for a bad value
            if not isinstance(entry, str | tuple):
                raise TypeError(f"Each field must be a string or a tuple of strings. XMLParser got {entry!r}")
            names = (entry,) if isinstance(entry, str) else entry
            if not names:
                raise ValueError("Field tuple cannot be empty. Give one or more tag names, e.g. ('code', 'answer')")
            for name in names:
                if not isinstance(name, str):
                    raise TypeError(f"All alternatives in a tuple must be strings. XMLParser got {name!r} in {entry!r}")
                if not _TAG_NAME.match(name):
                    raise ValueError(f"invalid XML tag name: {name!r}")
                if name in self._tag_to_field:
                    raise ValueError(f"Duplicate field name: {name} (a tag name may be declared only once)")
                self._tag_to_field[name] = len(self._fields)
            self._fields.append((names[0], names))
        self.answer_field = answer_field
        """The tag whose content `parse_answer` returns (any declared name, alternative or not)."""

        self._tag_patterns = {
            # whitespace around the content is outside the group, as in 0.1.x: parse(strip=False) keeps only inner whitespace
            tag: re.compile(rf"<{re.escape(tag)}>\s*(?P<body>.*?)\s*</{re.escape(tag)}>", re.DOTALL)
            for tag in self._tag_to_field
        }
        self._any_tag = re.compile(rf"<(?P<close>/?)(?P<tag>{self._alternation(self._tag_to_field)})>")

    @staticmethod
    def _alternation(names: Any) -> str:
        # Longest first, so that no name shadows a longer one sharing its prefix.
        return "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))

    # -- parsing ----------------------------------------------------------------------
    def parse(self, text: str, strip: bool = True, last: bool = False) -> SimpleNamespace:
        """One attribute per declared tag name (alternatives included): its content, or ``None``.

        A tag that occurs several times gives its first occurrence, as in 0.1.x;
        ``last=True`` takes the last one (the model's final word). Whitespace right
        after the opening tag and before the closing tag is never part of the content
        (0.1.x's pattern ``<tag>\\s*(.*?)\\s*</tag>``), with ``strip=False`` too.
        """
        result: dict[str, str | None] = {}
        for tag, pattern in self._tag_patterns.items():
            match: re.Match[str] | None = None
            if last:
                for match in pattern.finditer(text):  # noqa: B007 - keep the last match
                    pass
            else:
                match = pattern.search(text)
            if match is None:
                result[tag] = None
            else:
                body = match.group("body")
                result[tag] = body.strip() if strip else body
        return SimpleNamespace(**result)

    def parse_answer(self, completion: Messages) -> str | None:
        """The ``answer_field`` of the latest assistant turn that has one.

        As in 0.1.x, ``extract_fn`` is not applied here (it is accepted for signature
        compatibility); post-process in the reward function if needed.

        Within a message the last occurrence counts (0.1.x took the first one in chat
        mode but the last in completion mode; the last is the model's final word in
        both). Scanning turns backwards tolerates trailing turns without an answer.
        """
        texts = (
            [completion]
            if isinstance(completion, str)
            else [message_text(m) for m in reversed(self.get_assistant_messages(completion))]
        )
        for text in texts:
            value = getattr(self.parse(text, last=True), self.answer_field, None)
            if value is not None:
                return value
        return None

    # -- formatting ---------------------------------------------------------------------
    def get_fields(self) -> list[str]:
        """Canonical field names, in declaration order."""
        return [canonical for canonical, _ in self._fields]

    def format(self, **kwargs: Any) -> str:
        """Render a response in the expected layout (used for few-shot examples).

        Every field is required and may be given by its canonical or any alternative
        name (canonical preferred); the tag written is always the canonical one, as in
        0.1.x. Unknown keywords are ignored.
        """
        parts: list[str] = []
        for canonical, names in self._fields:
            key = next((n for n in names if kwargs.get(n) is not None), None)
            if key is None:
                raise ValueError(f"Missing value for field {canonical!r} (allowed: {list(names)})")
            parts.append(f"<{canonical}>\n{kwargs[key]}\n</{canonical}>")
        return "\n".join(parts)

    def get_format_str(self) -> str:
        """Format instructions for a system prompt (0.1.x's text).

        ``<think>\\n...\\n</think>`` per field; a field with alternatives is written
        ``<[ code | answer ]>\\n...\\n</[ code | answer ]>``.
        """
        blocks = []
        for canonical, names in self._fields:
            tag = f"[ {' | '.join(names)} ]" if len(names) > 1 else canonical
            blocks.append(f"<{tag}>\n...\n</{tag}>")
        return "\n".join(blocks)

    # -- reward -------------------------------------------------------------------------
    def score_format(self, text: str) -> float:
        """Format score of one message's text, in [0, 1]: 0.1.x's partial credit, made strict.

        The text is scanned for the declared tags (all alternatives). Fields are flat:
        a declared tag opened while another is still open, a closing tag without its
        opening tag (same name) and an unclosed tag are *mismatched*. A field is *well
        formed* when it occurs exactly once as an ``<tag>...</tag>`` pair and no
        mismatched tag involves it. The score adds up 0.1.x's four parts:

        * 0.4 * (well-formed fields / declared fields);
        * 0.2 when at least one field is well formed and no tag is mismatched;
        * 0.2 when the text (stripped) starts with the first field, well formed;
        * 0.2 when it ends with the last field, well formed.

        So a perfect response scores 1.0, one with stray text before or after the tags
        0.8, one missing a field 0.6 (all as in 0.1.x). Unlike 0.1.x, tags that do not
        pair up (nested, interleaved, unclosed, repeated fields) earn no field credit
        and lose the 0.2 for clean tags, and text without any field scores 0, not 0.2.
        A field with nothing but whitespace inside is not well formed either: tags alone
        show a reader nothing, and a model whose tokenizer has them as single tokens
        (``<think>``, ``</think>``) must not earn format credit for two tokens.
        """
        n = len(self._fields)
        pairs = [0] * n
        broken = [False] * n
        mismatched = False
        open_field: tuple[int, str] | None = None  # (field index, tag)
        content_from = 0  # where the open field's content starts

        for match in self._any_tag.finditer(text):
            tag = match.group("tag")
            idx = self._tag_to_field[tag]
            if not match.group("close"):
                if open_field is not None:
                    mismatched = True
                    broken[open_field[0]] = broken[idx] = True
                open_field = (idx, tag)
                content_from = match.end()
                continue
            if open_field == (idx, tag):
                pairs[idx] += 1
                if not text[content_from : match.start()].strip():
                    broken[idx] = True
            else:
                mismatched = True
                broken[idx] = True
                if open_field is not None:
                    broken[open_field[0]] = True
            open_field = None
        if open_field is not None:
            mismatched = True
            broken[open_field[0]] = True

        def ok(i: int) -> bool:
            return pairs[i] == 1 and not broken[i]

        well_formed = sum(1 for i in range(n) if ok(i))
        stripped = text.strip()
        score = 0.4 * well_formed / n
        if well_formed and not mismatched:
            score += 0.2
        if ok(0) and any(stripped.startswith(f"<{tag}>") for tag in self._fields[0][1]):
            score += 0.2
        if ok(n - 1) and any(stripped.endswith(f"</{tag}>") for tag in self._fields[-1][1]):
            score += 0.2
        return round(score, 10)

    def get_format_reward_func(self) -> RewardFunc:
        """Reward function: mean :meth:`score_format` over assistant turns (0.0 if none).

        A string completion counts as one assistant turn.
        """

        def format_reward_func(completion: Messages, **kwargs: Any) -> float:
            messages = self.get_assistant_messages(completion)
            return _mean([self.score_format(message_text(m)) for m in messages])

        return _named(format_reward_func, "format_reward_func")
