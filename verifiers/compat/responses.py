"""Model responses in ``state["responses"]`` that also read like the openai SDK's objects.

0.1.x kept the SDK's ``ChatCompletion``/``Completion`` objects there, and environments
and rubrics read ``state["responses"][-1].choices[0].message.content`` or
``.choices[0].finish_reason``. We keep our lean `ModelResponse` (built straight from
the JSON) and build the SDK object from the raw JSON only when one of its attributes
is asked for, so the hot path pays nothing for this.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ResponseView"]


class ResponseView:
    """A `ModelResponse` whose unknown attributes (``choices``, ``id``, ``model``...) come from the SDK object."""

    __slots__ = ("_sdk", "response")

    def __init__(self, response: Any) -> None:
        self.response = response
        self._sdk: Any = None

    def _sdk_object(self) -> Any:
        if self._sdk is None:
            raw = getattr(self.response, "raw", None) or {}
            from openai.types.chat import ChatCompletion
            from openai.types.completion import Completion

            choices = raw.get("choices") or []
            is_chat = bool(choices) and "message" in choices[0]
            cls = ChatCompletion if is_chat else Completion
            self._sdk = cls.model_construct(**raw) if not raw else _validate(cls, raw)
        return self._sdk

    @property
    def sdk(self) -> Any:
        """The openai SDK object (``ChatCompletion`` or ``Completion``) for this response."""
        return self._sdk_object()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return getattr(self.response, name)
        except AttributeError:
            return getattr(self._sdk_object(), name)

    def __repr__(self) -> str:
        return f"ResponseView({self.response!r})"


def _validate(cls: Any, raw: dict[str, Any]) -> Any:
    """Validate leniently: servers add fields (vLLM token ids) and omit some the SDK wants."""
    data = {"id": "", "created": 0, "model": "", "object": "chat.completion", **raw}
    if cls.__name__ == "Completion":
        data["object"] = "text_completion"
    try:
        return cls.model_validate(data)
    except Exception:
        return cls.model_construct(**data)
