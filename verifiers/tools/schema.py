"""Turn a documented Python function into an OpenAI tool schema.

Tools are ordinary functions: the signature says what the model may pass and the
Google-style docstring says what each argument means. Deriving the schema from them
keeps a single source of truth, so the schema the model sees can never drift from the
function that actually runs.
"""

from __future__ import annotations

import enum
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel, TypeAdapter

from verifiers.errors import ConfigError

__all__ = ["parse_docstring", "tool_schema"]

# OpenAI (and most compatible servers) reject other names.
_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

_ARG_SECTIONS = frozenset({"args", "arguments", "parameters", "params"})
# Every header we recognise ends the previous section; only the arg sections are kept.
_SECTIONS = _ARG_SECTIONS | frozenset(
    {
        "returns", "return", "yields", "yield", "raises", "raise", "examples", "example",
        "notes", "note", "attributes", "see also", "warnings", "warning", "references",
        "todo", "keyword args", "keyword arguments", "other parameters",
    }
)  # fmt: skip
_HEADER_RE = re.compile(r"^(?P<name>[A-Za-z][A-Za-z ]*?)\s*:\s*$")
# `name (type): description` or `name: description`; the type may itself hold parentheses.
_ARG_RE = re.compile(r"^(?P<name>\*{0,2}[A-Za-z_]\w*)\s*(?:\((?P<type>.*?)\))?\s*:\s*(?P<desc>.*)$")

_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into (summary, {argument name: description}).

    The summary is everything before the first section, joined into one paragraph:
    line breaks in source are layout, not meaning, and the model reads it as prose.
    """
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    args: dict[str, list[str]] = {}
    section: str | None = None  # None: still in the summary
    entry_indent: int | None = None
    current: str | None = None
    for line in lines:
        stripped = line.strip()
        header = _HEADER_RE.match(stripped)
        if header and header.group("name").lower() in _SECTIONS:
            section = header.group("name").lower()
            entry_indent, current = None, None
            continue
        if section is None:
            if stripped:
                summary.append(stripped)
            continue
        if section not in _ARG_SECTIONS or not stripped:
            continue
        indent = len(line) - len(line.lstrip())
        if entry_indent is None:
            entry_indent = indent
        match = _ARG_RE.match(stripped)
        if match and indent <= entry_indent:
            current = match.group("name").lstrip("*")
            args[current] = [match.group("desc").strip()]
        elif current is not None:  # continuation line, indented under its entry
            args[current].append(stripped)
    descriptions = {name: " ".join(part for part in parts if part) for name, parts in args.items()}
    return " ".join(summary), descriptions


def _json_type(value: Any) -> str | None:
    """JSON schema type of a literal / enum value (bool before int: bool is an int subclass)."""
    if value is None:
        return "null"
    for py_type in (bool, int, float, str):
        if isinstance(value, py_type):
            return _SCALARS[py_type]
    return None


def _enum_schema(values: Sequence[Any], where: str) -> dict[str, Any]:
    json_types: list[str] = []
    for value in values:
        json_type = _json_type(value)
        if json_type is None:
            raise ConfigError(
                f"{where}: enum value {value!r} is not a JSON scalar (str, int, float, bool, None)."
            )
        if json_type not in json_types:
            json_types.append(json_type)
    schema: dict[str, Any] = {"type": json_types[0] if len(json_types) == 1 else json_types}
    schema["enum"] = list(values)
    return schema


class _SchemaBuilder:
    """Converts type hints for one function, collecting `$defs` to hoist to the top.

    Pydantic schemas refer to nested models as `#/$defs/...`; the tool's `parameters`
    object is the root those references resolve against, so the definitions must live there.
    """

    def __init__(self) -> None:
        self.defs: dict[str, Any] = {}

    def _merge_defs(self, schema: dict[str, Any], where: str) -> dict[str, Any]:
        schema = dict(schema)
        for key, definition in schema.pop("$defs", {}).items():
            if key in self.defs and self.defs[key] != definition:
                raise ConfigError(f"{where}: two different types are both named {key!r}; rename one of them.")
            self.defs[key] = definition
        return schema

    def convert(self, hint: Any, where: str) -> dict[str, Any]:
        if hint is inspect.Parameter.empty or hint is Any:
            return {}
        if hint is None or hint is type(None):
            return {"type": "null"}
        if hint in _SCALARS:
            return {"type": _SCALARS[hint]}
        origin = typing.get_origin(hint)
        args = typing.get_args(hint)
        if origin is typing.Annotated:
            schema = self.convert(args[0], where)
            notes = [meta for meta in args[1:] if isinstance(meta, str)]
            return {**schema, "description": " ".join(notes)} if notes else schema
        if origin is typing.Union or origin is types.UnionType:
            options = [arg for arg in args if arg is not type(None)]
            if len(options) == 1:  # Optional[X]: the model either passes X or leaves it out
                return self.convert(options[0], where)
            return {"anyOf": [self.convert(arg, where) for arg in args]}
        if origin is typing.Literal:
            return _enum_schema(args, where)
        if isinstance(hint, type) and issubclass(hint, enum.Enum):
            return _enum_schema([member.value for member in hint], where)
        if isinstance(hint, type) and issubclass(hint, BaseModel):
            return self._merge_defs(hint.model_json_schema(), where)
        container = origin if origin is not None else hint
        if container in (list, tuple, set, frozenset) or container in _ABC_SEQUENCES:
            return self._array(container, args, where)
        if container is dict or container in _ABC_MAPPINGS:
            return self._object(args, where)
        return self._fallback(hint, where)

    def _array(self, container: Any, args: tuple[Any, ...], where: str) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": "array"}
        if container is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
            items = [self.convert(arg, where) for arg in args]  # fixed-length tuple
            return {**schema, "prefixItems": items, "minItems": len(items), "maxItems": len(items)}
        if args:
            schema["items"] = self.convert(args[0], where)
        if container in (set, frozenset, _ABC_SET):
            schema["uniqueItems"] = True
        return schema

    def _object(self, args: tuple[Any, ...], where: str) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": "object"}
        if not args:
            return schema
        key, value = args
        if key not in (str, Any):
            raise ConfigError(f"{where}: dict keys must be str (JSON object keys are strings), got {key!r}.")
        value_schema = self.convert(value, where)
        schema["additionalProperties"] = value_schema if value_schema else True
        return schema

    def _fallback(self, hint: Any, where: str) -> dict[str, Any]:
        """Let pydantic describe what it knows (datetime, dataclasses, TypedDict, ...)."""
        try:
            schema = TypeAdapter(hint).json_schema()
        except Exception as exc:
            raise ConfigError(
                f"{where}: type hint {hint!r} cannot be expressed as JSON schema ({type(exc).__name__}). "
                "Use str, int, float, bool, list, dict, Literal, an Enum or a pydantic model."
            ) from exc
        return self._merge_defs(schema, where)


_ABC_SET = typing.get_origin(typing.AbstractSet)
_ABC_SEQUENCES = (typing.get_origin(typing.Sequence), typing.get_origin(typing.Iterable), _ABC_SET)
_ABC_MAPPINGS = (typing.get_origin(typing.Mapping), typing.get_origin(typing.MutableMapping))


def _json_default(value: Any) -> tuple[bool, Any]:
    """(True, json value) when a default can be shown to the model, else (False, None)."""
    if isinstance(value, enum.Enum):
        value = value.value
    elif isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    try:
        return True, json.loads(json.dumps(value))  # normalises tuples to lists
    except (TypeError, ValueError):
        return False, None


def _tool_name(fn: Any) -> str:
    name = getattr(fn, "__name__", None)
    if not isinstance(name, str):
        raise ConfigError(
            f"Cannot make a tool from {fn!r}: it has no __name__ (functools.partial and callable objects "
            "are not supported). Wrap it in a named function with a docstring."
        )
    if name == "<lambda>":
        raise ConfigError(
            "Cannot make a tool from a lambda: the model needs a real name and a docstring. "
            "Define it with `def my_tool(...):` instead."
        )
    if not _NAME_RE.match(name):
        raise ConfigError(f"Tool name {name!r} is invalid: use 1-64 letters, digits, '_' or '-'.")
    return name


def tool_schema(fn: Callable[..., Any], args_to_skip: Sequence[str] = ()) -> dict[str, Any]:
    """OpenAI `tools` entry for `fn`, built from its signature and Google-style docstring.

    `args_to_skip` names parameters the environment injects itself (state, sandbox
    handles, ...): the model must not see them. Names that are not parameters are
    ignored so one skip list can be shared by many tools.
    """
    if not callable(fn):
        raise ConfigError(f"Cannot make a tool from {fn!r}: it is not callable.")
    name = _tool_name(fn)
    try:
        signature = inspect.signature(fn)
        hints = typing.get_type_hints(inspect.unwrap(fn), include_extras=True)
    except (TypeError, ValueError, NameError) as exc:
        raise ConfigError(
            f"Cannot read the signature / type hints of tool {name!r}: {exc}. Type hints must be "
            "resolvable from the function's module (define the types at module level)."
        ) from exc
    summary, arg_docs = parse_docstring(inspect.getdoc(fn))
    builder = _SchemaBuilder()
    skip = set(args_to_skip)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for param in signature.parameters.values():
        if param.name == "self" or param.name in skip:
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        where = f"Tool {name!r}, parameter {param.name!r}"
        if param.kind is param.POSITIONAL_ONLY:
            raise ConfigError(f"{where} is positional-only; tool arguments are passed by name.")
        schema = builder.convert(hints.get(param.name, inspect.Parameter.empty), where)
        if arg_docs.get(param.name):
            schema["description"] = arg_docs[param.name]
        if param.default is param.empty:
            required.append(param.name)
        else:
            ok, default = _json_default(param.default)
            if ok:
                schema["default"] = default
        properties[param.name] = schema
    parameters: dict[str, Any] = {"type": "object", "properties": properties, "required": required}
    if builder.defs:
        parameters["$defs"] = builder.defs
    return {"type": "function", "function": {"name": name, "description": summary, "parameters": parameters}}
