"""Where an expert episode's *content* is: the text and tool-call argument values the expert chose.

Why: a randomly initialised model trained on whole expert episodes learns the chat template's
fixed markup (``<tool_call>{"name": ...``) long before it learns to copy the data the episode
depends on (the key from the question into the call, the tool's reply into the answer), and
once the markup is learned the copies stall (``docs/training.md``, "Agentic learning on a
laptop"). An SFT warm-up whose loss covers only the content learns the copies first; the
markup is learned afterwards. What is content is read from the messages themselves, never
marked by hand: an assistant message's text and the leaf values of its tool calls' arguments.
Tool names, argument names, JSON punctuation and turn ends are the template's markup.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

__all__ = ["content_char_spans", "token_mask_from_spans"]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def _leaves(value: Any) -> Iterator[tuple[str, Any]]:
    """(argument name, leaf value) pairs of a tool call's arguments, depth first."""
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, dict | list):
                yield from _leaves(v)
            else:
                yield str(k), v
    elif isinstance(value, list):
        for v in value:
            yield from _leaves(v) if isinstance(v, dict | list) else iter([("", v)])


def _value_span(text: str, name: str, value: Any, start: int, end: int) -> tuple[tuple[int, int] | None, int]:
    """The span of ``value`` as JSON after its argument ``name`` in ``text[start:end]``; quotes excluded."""
    at = start
    if name:
        k = text.find(json.dumps(name, ensure_ascii=False), start, end)
        if k < 0:
            return None, start
        at = k + len(json.dumps(name, ensure_ascii=False))
    rendered = json.dumps(value, ensure_ascii=False)
    v = text.find(rendered, at, end)
    if v < 0:
        return None, start
    if isinstance(value, str):  # the quotes are markup; an empty string has no content
        return ((v + 1, v + len(rendered) - 1) if len(rendered) > 2 else None), v + len(rendered)
    return (v, v + len(rendered)), v + len(rendered)


def content_char_spans(text: str, start: int, end: int, message: dict[str, Any]) -> list[tuple[int, int]]:
    """Character spans of ``message``'s content inside its rendering ``text[start:end]``.

    Found in order: the message text, then each tool call's argument values. A piece the
    template did not render verbatim is left out (it is trained with the markup later).
    """
    spans: list[tuple[int, int]] = []
    cursor = start
    body = _text(message.get("content"))
    if body.strip():
        at = text.find(body, cursor, end)
        if at >= 0:
            spans.append((at, at + len(body)))
            cursor = at + len(body)
    for call in message.get("tool_calls") or []:
        fn = call.get("function", call) if isinstance(call, dict) else {}
        args = fn.get("arguments")
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:  # rendered verbatim: the whole text is the expert's
                at = text.find(args, cursor, end)
                if at >= 0 and args:
                    spans.append((at, at + len(args)))
                    cursor = at + len(args)
                continue
        for name, value in _leaves(args):
            span, cursor = _value_span(text, name, value, cursor, end)
            if span is not None:
                spans.append(span)
    return spans


def token_mask_from_spans(offsets: list[tuple[int, int]], spans: list[tuple[int, int]]) -> list[int]:
    """1 for every token whose characters overlap one of ``spans``."""
    mask = [0] * len(offsets)
    for i, (s, e) in enumerate(offsets):
        if e > s and any(s < ce and e > cs for cs, ce in spans):
            mask[i] = 1
    return mask
