"""Tool calls that read like the openai SDK's objects and serialise like plain JSON.

0.1.x environments received the SDK's ``ChatCompletionMessageToolCall`` objects in
their transcripts and wrote ``call.function.name`` / ``call.function.arguments`` /
``call.id``; newer code (and ours) indexes dicts: ``call["function"]["name"]``.
`ToolCall` is a ``dict`` (so ``json.dumps``, pydantic dumps and results.jsonl see
plain JSON) whose keys can also be read as attributes, so both styles work on the
same object.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["AttrDict", "FunctionCall", "ToolCall", "as_tool_calls"]


class AttrDict(dict[str, Any]):
    """A dict whose keys are also readable (and writable) as attributes."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no field {name!r}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value

    def model_dump(self, **_: Any) -> dict[str, Any]:
        """Plain nested dicts, like the SDK object's ``model_dump()``."""
        return {k: (v.model_dump() if isinstance(v, AttrDict) else v) for k, v in self.items()}

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump()

    def __deepcopy__(self, memo: dict[int, Any]) -> AttrDict:
        import copy

        return type(self)({k: copy.deepcopy(v, memo) for k, v in self.items()})

    def __reduce__(self) -> Any:
        return (type(self), (dict(self),))


class FunctionCall(AttrDict):
    """``{"name": ..., "arguments": "<json text>"}`` with ``.name`` / ``.arguments``."""

    __slots__ = ()


class ToolCall(AttrDict):
    """``{"id": ..., "type": "function", "function": {...}}`` with ``.id`` / ``.function.name``."""

    __slots__ = ()

    @classmethod
    def from_any(cls, call: Any) -> ToolCall:
        """From an OpenAI-format dict or an openai SDK object."""
        if isinstance(call, ToolCall):
            return call
        if not isinstance(call, Mapping):
            dump = getattr(call, "model_dump", None)
            call = dump() if callable(dump) else {
                "id": getattr(call, "id", None),
                "type": getattr(call, "type", "function"),
                "function": getattr(call, "function", None),
            }
        fn = call.get("function") or {}
        if not isinstance(fn, Mapping):
            fn = {"name": getattr(fn, "name", None), "arguments": getattr(fn, "arguments", None)}
        out = cls({k: v for k, v in call.items() if k != "function"})
        out.setdefault("id", None)
        out.setdefault("type", "function")
        out["function"] = FunctionCall({"name": None, "arguments": None, **fn})
        return out


def as_tool_calls(calls: Any) -> list[ToolCall]:
    return [ToolCall.from_any(c) for c in calls or []]
