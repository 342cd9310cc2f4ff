"""The API dialects the gateway speaks besides chat completions, translated to one chat call.

Programs are written against the API their SDK calls by default: the OpenAI Agents SDK and
Codex call the **Responses API**, programs on the ``anthropic`` SDK (the Claude Agent SDK among
them) call **Messages**. Each dialect here is a pure translation: the program's request becomes
the session's chat-completions call (messages, tools, ``tool_choice``, ``stop``), and the chat
reply (recorded with its token ids exactly as a chat call is) becomes the dialect's response
object or event stream. Nothing is sampled or recorded here, so a rollout trains the same
whichever dialect its program speaks.

The pieces every dialect builds alike (tools, tool calls and their arguments, reasoning, ids,
events) are in `verifiers.gateway.dialects.core`; each dialect module is a pair of translations.

`DialectError` is a request the gateway refuses (a built-in tool it cannot run, an unknown
``previous_response_id``): an HTTP error with the dialect's own error shape.
"""

from __future__ import annotations

from typing import Any


class DialectError(Exception):
    """A program's request that cannot be translated: answered with ``status`` and the message."""

    def __init__(self, message: str, *, status: int = 400, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.param = param
        self.code = code


def chat_content(parts: list[dict[str, Any]], text_only: bool = False) -> str | list[dict[str, Any]]:
    """Chat-completions content for normalised parts (``{"type": "text"|"image_url", ...}``).

    One text part becomes a plain string (what every chat template renders); several parts stay
    a list, so a program's own split (and its images) reach the server as it sent them.
    ``text_only`` joins the texts (assistant and tool content, which the chat API takes as text).
    """
    if text_only or (len(parts) <= 1 and all(p["type"] == "text" for p in parts)):
        return "".join(p.get("text", "") for p in parts)
    return parts


__all__ = ["DialectError", "chat_content"]
