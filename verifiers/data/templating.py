"""The one place where a chat template turns messages into prompt text or token ids.

Everything that needs a templated prompt (the overlong filter, prompt-length
statistics, the trainer's prompt tokens) calls `apply_chat_template` here, so they
all agree on the exact tokens. Differences between two templating paths are the
classic source of train/inference mismatches (ANCHORS.md §6).

Rows read back from parquet or Arrow carry messages as structs with the union of all
keys, absent ones filled with ``None`` (``"tool_calls": None`` on a user message).
Templates test ``message.tool_calls is defined``, so those ``None`` keys are dropped
before rendering (``content`` is kept even when ``None``: the template decides).

The text is rendered first and then encoded with ``add_special_tokens=False``: the
template already writes every special token (BOS included), and this behaves the
same whatever ``apply_chat_template(tokenize=True)`` returns in a given transformers
version (a list in 4.x, a ``BatchEncoding`` in 5.x).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from verifiers.errors import VFError


class ChatTemplateError(VFError):
    """The chat template could not render a row (bad messages, a role it rejects, no template at all)."""


def clean_messages(messages: Any) -> list[dict[str, Any]]:
    """Messages as plain dicts without Arrow's ``None`` fill-ins; raises `ChatTemplateError` on a non-chat value."""
    if isinstance(messages, str) or not isinstance(messages, Sequence):
        raise ChatTemplateError(
            f"expected a list of chat messages, got {type(messages).__name__}"
            + (
                ": plain-text prompts are encoded with tokenizer.encode, not a chat template"
                if isinstance(messages, str)
                else ""
            )
        )
    out: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise ChatTemplateError(
                f"message {i} is a {type(m).__name__}, not a dict with 'role' and 'content'"
            )
        if m.get("role") is None:
            raise ChatTemplateError(
                f"message {i} has no 'role' (keys: {sorted(k for k, v in m.items() if v is not None)})"
            )
        out.append({k: v for k, v in m.items() if v is not None or k == "content"})
    return out


def parse_tools(tools: Any) -> list[dict[str, Any]] | None:
    """Tool schemas from a list, a JSON string (how they survive parquet) or None."""
    if tools is None or tools == "" or tools == []:
        return None
    if isinstance(tools, str):
        try:
            tools = json.loads(tools)
        except json.JSONDecodeError as exc:
            raise ChatTemplateError(f"tools are a string but not valid JSON: {exc}") from exc
    if isinstance(tools, Mapping):
        tools = [tools]
    if not isinstance(tools, Sequence) or not all(isinstance(t, Mapping) for t in tools):
        raise ChatTemplateError(f"tools must be a list of JSON tool schemas, got {type(tools).__name__}")
    return [dict(t) for t in tools]


def _describe(messages: list[dict[str, Any]]) -> str:
    parts = [f"{m.get('role')}({', '.join(sorted(m))})" for m in messages[:6]]
    more = f", ... {len(messages) - 6} more" if len(messages) > 6 else ""
    return "[" + ", ".join(parts) + more + "]"


def apply_chat_template(
    tokenizer: Any,
    messages: Any,
    *,
    tools: Any = None,
    add_generation_prompt: bool = True,
    tokenize: bool = True,
    **template_kwargs: Any,
) -> list[int] | str:
    """Render ``messages`` with the tokenizer's chat template: token ids, or the text with ``tokenize=False``.

    Extra keyword arguments go to the template (e.g. ``enable_thinking=False``). Any
    failure (no template, malformed messages, a ``raise_exception`` in the template)
    becomes a `ChatTemplateError` that names the problem and the message roles.
    """
    if getattr(tokenizer, "chat_template", None) is None:
        name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
        raise ChatTemplateError(
            f"tokenizer {name!r} has no chat template; use a chat/instruct model's tokenizer or set "
            f"tokenizer.chat_template to a Jinja template before loading data"
        )
    msgs = clean_messages(messages)
    schemas = parse_tools(tools)
    try:
        text = tokenizer.apply_chat_template(
            msgs,
            tools=schemas,
            add_generation_prompt=add_generation_prompt,
            tokenize=False,
            **template_kwargs,
        )
    except Exception as exc:  # the template is user code: any exception means this row cannot be rendered
        raise ChatTemplateError(
            f"chat template failed on messages {_describe(msgs)}: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(text, str):
        raise ChatTemplateError(f"chat template rendered {type(text).__name__}, expected text")
    if not tokenize:
        return text
    return list(tokenizer.encode(text, add_special_tokens=False))


def encode_prompt(tokenizer: Any, prompt: Any, *, tools: Any = None, **template_kwargs: Any) -> list[int]:
    """Prompt token ids for a chat prompt (templated, with generation prompt) or a plain-text prompt (encoded as is)."""
    if isinstance(prompt, str):
        return list(tokenizer.encode(prompt, add_special_tokens=False))
    ids = apply_chat_template(tokenizer, prompt, tools=tools, add_generation_prompt=True, **template_kwargs)
    return list(ids)
