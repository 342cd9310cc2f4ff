"""XMLParser: read ``<tag>...</tag>`` fields from a response and reward the format.

Models are asked to answer in a light XML layout such as
``<think>...</think>\\n<answer>...</answer>``. Parsing is forgiving (take what is there);
the format reward is strict, so that training pushes the model towards output the
parser can always read.
"""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

from verifiers.parsers.parser import Messages, Parser, RewardFunc, _mean, _named, message_text

__all__ = ["XMLParser"]

_TAG_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*\Z")


class XMLParser(Parser):
    """Parser for responses made of XML-style fields.

    ``fields`` lists the expected tags in order. An entry may be a tuple of alternative
    tag names for the same field, the first being canonical: ``("code", "python")``
    accepts ``<python>...</python>`` but reports it as ``code``.
    """

    def __init__(self, fields: list[str | tuple[str, ...]], answer_field: str = "answer") -> None:
        super().__init__()
        if not fields:
            raise ValueError("XMLParser needs at least one field")
        self._fields: list[tuple[str, tuple[str, ...]]] = []
        self._tag_to_field: dict[str, int] = {}
        for entry in fields:
            names = (entry,) if isinstance(entry, str) else tuple(entry)
            if not names:
                raise ValueError("XMLParser field alternatives must not be empty")
            for name in names:
                if not isinstance(name, str) or not _TAG_NAME.match(name):
                    raise ValueError(f"invalid XML tag name: {name!r}")
                if name in self._tag_to_field:
                    raise ValueError(f"tag {name!r} is declared more than once")
                self._tag_to_field[name] = len(self._fields)
            self._fields.append((names[0], names))
        # An alternative name for the answer field is accepted and mapped to its canonical name.
        idx = self._tag_to_field.get(answer_field)
        self.answer_field = self._fields[idx][0] if idx is not None else answer_field

        self._field_patterns = [
            re.compile(rf"<(?P<tag>{self._alternation(names)})>(?P<body>.*?)</(?P=tag)>", re.DOTALL)
            for _, names in self._fields
        ]
        self._any_tag = re.compile(rf"<(?P<close>/?)(?P<tag>{self._alternation(self._tag_to_field)})>")

    @staticmethod
    def _alternation(names: Any) -> str:
        # Longest first, so that no name shadows a longer one sharing its prefix.
        return "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))

    # -- parsing ----------------------------------------------------------------------
    def parse(self, text: str, strip: bool = True, last: bool = True) -> SimpleNamespace:
        """One attribute per canonical field: the field's content, or ``None`` if absent.

        When a field occurs several times the last occurrence wins (the model's final
        word), across all alternative tag names; ``last=False`` takes the first instead.
        """
        result: dict[str, str | None] = {}
        for (canonical, _), pattern in zip(self._fields, self._field_patterns, strict=True):
            matches = list(pattern.finditer(text))
            if not matches:
                result[canonical] = None
                continue
            body = matches[-1 if last else 0].group("body")
            result[canonical] = body.strip() if strip else body
        return SimpleNamespace(**result)

    def parse_answer(self, completion: Messages) -> str | None:
        """The ``answer_field`` of the latest assistant turn that has one.

        Scanning backwards tolerates trailing turns without an answer (e.g. a closing
        remark after the answer was given).
        """
        if isinstance(completion, str):
            return getattr(self.parse(completion), self.answer_field, None)
        for message in reversed(self.get_assistant_messages(completion)):
            value = getattr(self.parse(message_text(message)), self.answer_field, None)
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
        name; the tag is written with the name used. Unknown keywords are ignored.
        """
        parts: list[str] = []
        for canonical, names in self._fields:
            tag = next((n for n in names if kwargs.get(n) is not None), None)
            if tag is None:
                allowed = ", ".join(names)
                raise ValueError(f"missing value for field {canonical!r} (accepted names: {allowed})")
            parts.append(f"<{tag}>\n{kwargs[tag]}\n</{tag}>")
        return "\n".join(parts)

    def get_format_str(self) -> str:
        """Format instructions for a system prompt."""
        lines = ["Respond in the following format:"]
        for canonical, _ in self._fields:
            lines.append(f"<{canonical}>\n...\n</{canonical}>")
        for canonical, names in self._fields:
            if len(names) > 1:
                others = ", ".join(f"<{n}>" for n in names[1:])
                lines.append(f"(<{canonical}> may also be written as {others})")
        return "\n".join(lines)

    # -- reward -------------------------------------------------------------------------
    def score_format(self, text: str) -> float:
        """Strict format score of one message's text, in [0, 1].

        The text is scanned for the declared tags (all alternatives). Fields are flat:
        a declared tag opened while another field is still open counts as a mismatch.
        Tags are *mismatched* when a closing tag has no matching opening tag (or
        closes a different field or alternative name), when a field is opened inside
        another (interleaving or nesting) or when a field is left unclosed.

        A field is *well formed* when it occurs exactly once as an
        ``<tag>...</tag>`` pair with the same name at both ends, and no mismatched tag
        involves it. Order of fields is not checked. Then:

        * 1.0: every field well formed, nothing outside the pairs but whitespace;
        * 0.8: every field well formed, other text outside the pairs;
        * otherwise (mismatched tags, missing or repeated fields):
          ``0.5 * well_formed_fields / declared_fields``, so at most 0.5.
        """
        n = len(self._fields)
        pairs = [0] * n
        broken = [False] * n
        spans: list[tuple[int, int]] = []
        mismatched = False
        open_field: tuple[int, str, int] | None = None  # (field index, tag, start offset)

        for match in self._any_tag.finditer(text):
            tag = match.group("tag")
            idx = self._tag_to_field[tag]
            if not match.group("close"):
                if open_field is not None:
                    mismatched = True
                    broken[open_field[0]] = broken[idx] = True
                open_field = (idx, tag, match.start())
                continue
            if open_field is not None and open_field[:2] == (idx, tag):
                pairs[idx] += 1
                spans.append((open_field[2], match.end()))
            else:
                mismatched = True
                broken[idx] = True
                if open_field is not None:
                    broken[open_field[0]] = True
            open_field = None
        if open_field is not None:
            mismatched = True
            broken[open_field[0]] = True

        well_formed = sum(1 for i in range(n) if pairs[i] == 1 and not broken[i])
        if mismatched or well_formed < n:
            return 0.5 * well_formed / n
        outside, cursor = [], 0
        for start, end in spans:
            outside.append(text[cursor:start])
            cursor = end
        outside.append(text[cursor:])
        return 1.0 if not "".join(outside).strip() else 0.8

    def get_format_reward_func(self) -> RewardFunc:
        """Reward function: mean :meth:`score_format` over assistant turns (0.0 if none).

        A string completion counts as one assistant turn.
        """

        def format_reward_func(completion: Messages, **kwargs: Any) -> float:
            messages = self.get_assistant_messages(completion)
            return _mean([self.score_format(message_text(m)) for m in messages])

        return _named(format_reward_func, "format_reward_func")
