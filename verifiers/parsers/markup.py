"""The text of a reply as a user reads it: the protocol's markup tokens taken out.

Chat tokenizers carry multi-character tokens that are protocol, not prose: ChatML's
``<|im_end|>``, Llama's ``<|eot_id|>``, Gemma's ``<end_of_turn>`` and the Hermes tool and
reasoning tags (``<tool_call>``, ``<think>``). Real tokenizers (Qwen2.5's, the tiny test
tokenizer's) keep the tool tags as ordinary tokens, so a model can sample them anywhere and
servers return them as text when no tool parser claims them. A reward that counts
characters would then pay for one sampled token as for eleven typed characters, which is a
reward hack a policy finds (four ``<tool_call>`` tokens once earned 0.09 on letter-repeat).
Rewards that score free text read it through :func:`reply_text` instead.
"""

from __future__ import annotations

import re
from typing import Any

from verifiers.parsers.parser import _field, message_text

__all__ = ["MARKUP_TAGS", "reply_text", "strip_markup"]

MARKUP_TAGS = (
    "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<tools>", "</tools>",
    "<think>", "</think>", "<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>", "<pad>", "<unk>",
    "<s>", "</s>",
)
"""Tags that are tokens of some chat protocol (Hermes tool calls, reasoning, Gemma, Llama 2)."""

# <|im_start|>, <|im_end|>, <|endoftext|>, <|eot_id|>, <|start_header_id|>, <|pad|>, ...
_SPECIAL = re.compile(r"<\|[^<>|\s]{1,64}\|>")
_TAGS = re.compile("|".join(re.escape(t) for t in sorted(MARKUP_TAGS, key=len, reverse=True)))


def strip_markup(text: str) -> str:
    """``text`` without ``<|...|>`` special tokens and the tags in :data:`MARKUP_TAGS`."""
    return _TAGS.sub("", _SPECIAL.sub("", text))


def reply_text(completion: Any) -> str:
    """The assistant's text in ``completion`` (messages or a string), turns joined, markup removed.

    What the tool calls and results of an episode were is in the messages' ``tool_calls`` and
    ``tool`` turns; this is only the prose a user would read.
    """
    if isinstance(completion, str):
        return strip_markup(completion)
    texts = [message_text(m) for m in completion if _field(m, "role") == "assistant"]
    return strip_markup("\n".join(texts))
