"""Hermes-style tool-call parsing: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``.

A model's malformed call must never become a server error: when any call block fails
to parse, the whole output is returned as plain text, so the environment sees what the
model wrote and can tell it (that is what vLLM's hermes parser does too).
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

OPEN = "<tool_call>"
CLOSE = "</tool_call>"
_BLOCK = re.compile(re.escape(OPEN) + r"(.*?)" + re.escape(CLOSE), re.S)


def parse_tool_calls(text: str) -> tuple[str | None, list[dict[str, Any]]]:
    """Split model output into ``(content, tool_calls)`` in OpenAI message format.

    Returns ``(text, [])`` when there is no complete, valid call block.
    """
    start = text.find(OPEN)
    if start < 0:
        return text, []
    calls: list[dict[str, Any]] = []
    for m in _BLOCK.finditer(text):
        try:
            obj = json.loads(m.group(1).strip())
        except json.JSONDecodeError:
            return text, []
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
            return text, []
        args = obj.get("arguments", obj.get("parameters", {}))
        if isinstance(args, str):
            try:
                json.loads(args)
            except json.JSONDecodeError:
                return text, []
            arg_text = args
        else:
            arg_text = json.dumps(args, ensure_ascii=False)
        calls.append(
            {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function", "function": {"name": obj["name"], "arguments": arg_text}}
        )
    if not calls or text.count(OPEN) != len(calls):
        return text, []  # an unclosed or broken block: keep everything as text
    content = text[:start].strip()
    return (content or None), calls


def forced_text(tool_name: str | None) -> str:
    """What a forced ``tool_choice`` writes before sampling starts: the block's opening, and with a
    named tool its name, so the model only fills in the arguments (``required``: ``tool_name`` None)."""
    if tool_name is None:
        return OPEN
    return f'{OPEN}{{"name": {json.dumps(tool_name)}, "arguments": '


def tag_prefix_len(text: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``<tool_call>``.

    While streaming, that many trailing characters are held back because they may turn
    out to open a tool call.
    """
    for k in range(min(len(OPEN) - 1, len(text)), 0, -1):
        if OPEN.startswith(text[-k:]):
            return k
    return 0
