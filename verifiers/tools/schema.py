"""Turn a documented Python function into an OpenAI tool schema.

Tools are ordinary functions: the signature says what the model may pass and the
docstring says what each argument means. Deriving the schema from them keeps a single
source of truth, so the schema the model sees can never drift from the function that
actually runs.

The schema *text* is verifiers 0.1.x's, byte for byte (0.1.x built it with
``openai-agents``): a pydantic model of the parameters (per-parameter ``title``,
``default``, ``anyOf`` for ``Optional``), made strict (every property required,
``additionalProperties: false``, null defaults dropped) and sent with
``"strict": true``. A model trained on 0.1.x environments is served the prompt it
learned from. Where 0.1.x refused a function (a ``dict`` parameter or ``**kwargs``
cannot be strict), the schema is sent non-strict (``"strict": false``) and
``**kwargs`` is left out, instead of failing.
"""

from __future__ import annotations

import copy
import inspect
import re
import typing
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic.fields import FieldInfo

from verifiers.errors import ConfigError
from verifiers.tools.docstrings import parse_tool_docstring

__all__ = ["parse_docstring", "tool_schema"]

# OpenAI (and most compatible servers) reject other names.
_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """(description, {argument name: description}) of a docstring, as the tool schema shows them.

    The description is the first text block with its line breaks (0.1.x's reading);
    sections (``Args:``, ``Returns:``, ``Note:``, ...) end it.
    """
    info = parse_tool_docstring(doc)
    return info.description or "", info.params


class _NotStrict(Exception):
    """The schema allows undeclared properties (a dict), so it cannot be made strict."""


def _strict(schema: Any, root: dict[str, Any]) -> dict[str, Any]:
    """openai-agents' ``ensure_strict_json_schema`` for the schemas pydantic generates."""
    if not isinstance(schema, dict):
        raise _NotStrict
    for defs_key in ("$defs", "definitions"):
        if isinstance(schema.get(defs_key), dict):
            for sub in schema[defs_key].values():
                _strict(sub, root)
    typ = schema.get("type")
    properties = schema.get("properties")
    if typ is None and isinstance(properties, dict):
        typ = schema["type"] = "object"
    elif typ is None and schema.get("additionalProperties", False) is not False:
        raise _NotStrict
    is_object = typ == "object" or (isinstance(typ, list) and "object" in typ)
    if is_object and "additionalProperties" not in schema:
        schema["additionalProperties"] = False
    elif is_object and schema["additionalProperties"] is not False:
        raise _NotStrict
    if isinstance(properties, dict):
        schema["required"] = list(properties)
        schema["properties"] = {key: _strict(sub, root) for key, sub in properties.items()}
    if isinstance(schema.get("items"), dict):
        schema["items"] = _strict(schema["items"], root)
    if isinstance(schema.get("anyOf"), list):
        schema["anyOf"] = [_strict(sub, root) for sub in schema["anyOf"]]
    if isinstance(schema.get("oneOf"), list):
        any_of = schema.get("anyOf", []) if isinstance(schema.get("anyOf"), list) else []
        schema["anyOf"] = any_of + [_strict(sub, root) for sub in schema.pop("oneOf")]
    if isinstance(schema.get("allOf"), list):
        schema["allOf"] = [_strict(sub, root) for sub in schema["allOf"]]
    if "default" in schema and schema["default"] is None:
        schema.pop("default")
    ref = schema.get("$ref")
    if isinstance(ref, str) and len(schema) > 1:  # a $ref with siblings is inlined
        resolved: Any = root
        for part in ref.removeprefix("#/").split("/"):
            resolved = resolved[part.replace("~1", "/").replace("~0", "~")]
        schema.pop("$ref")
        schema.update({**resolved, **schema})
        return _strict(schema, root)
    return schema


def _field(param: inspect.Parameter, hint: Any, description: str | None) -> tuple[Any, Any]:
    """(annotation, FieldInfo) for one parameter, as openai-agents declared it.

    ``Annotated[...]`` metadata (a pydantic ``Field``, constraints) is merged into the
    field; the docstring's description wins over the annotation's.
    """
    stripped, metadata = hint, ()
    while typing.get_origin(stripped) is typing.Annotated:
        stripped, *extra = typing.get_args(stripped)
        metadata = (*metadata, *extra)
    if description is None:
        description = next((m for m in metadata if isinstance(m, str)), None)
    if param.kind is param.VAR_POSITIONAL:
        if typing.get_origin(stripped) is tuple:
            args = typing.get_args(stripped)
            stripped = list[args[0]] if len(args) == 2 and args[1] is Ellipsis else list[Any]  # type: ignore[valid-type]
        else:
            stripped = list[stripped]  # type: ignore[valid-type]
        return stripped, Field(default_factory=list, description=description)
    default = param.default
    if metadata:
        annotated = FieldInfo.from_annotation(hint)
        merged = FieldInfo.merge_field_infos(annotated, description=description or annotated.description)
        if default is not param.empty and not isinstance(default, FieldInfo):
            merged = FieldInfo.merge_field_infos(merged, default=default)
        elif isinstance(default, FieldInfo):
            merged = FieldInfo.from_annotated_attribute(typing.Annotated[stripped, merged], default)
            if not any(isinstance(item, FieldInfo) for item in metadata):
                merged = FieldInfo.merge_field_infos(merged, description=description or default.description)
        return stripped, merged
    if default is param.empty:
        return stripped, Field(..., description=description)
    if isinstance(default, FieldInfo):
        return stripped, FieldInfo.merge_field_infos(default, description=description or default.description)
    return stripped, Field(default=default, description=description)


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
    """OpenAI `tools` entry for `fn`: verifiers 0.1.x's schema text (see the module docstring).

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
    doc = parse_tool_docstring(inspect.getdoc(fn))
    fields: dict[str, Any] = {}
    for param in signature.parameters.values():
        if param.name == "self" or param.kind is param.VAR_KEYWORD:
            continue
        if param.kind is param.POSITIONAL_ONLY:
            raise ConfigError(
                f"Tool {name!r}, parameter {param.name!r} is positional-only; tool arguments are passed by name."
            )
        fields[param.name] = _field(param, hints.get(param.name, Any), doc.params.get(param.name))
    parameters, strict = _parameters_without(name, fields, set(args_to_skip) & set(fields))
    function = {"name": name, "description": doc.description or "", "parameters": parameters, "strict": strict}
    return {"type": "function", "function": function}


def _parameters_without(name: str, fields: dict[str, Any], skip: set[str]) -> tuple[dict[str, Any], bool]:
    """(parameters schema, strict) without the ``skip`` parameters.

    0.1.x (``StatefulToolEnv.add_tool``) built the whole schema, then deleted the skipped
    properties and their ``required`` entries; doing the same keeps the text identical
    (key positions, ``$defs``). When the hidden parameters themselves cannot be
    described (a sandbox handle's class, a dict), they are left out before building.
    """
    if skip:
        try:
            parameters, strict = _parameters(name, fields)
        except ConfigError:
            strict = False
        if strict:
            for arg in skip:
                parameters["properties"].pop(arg, None)
                if arg in parameters["required"]:
                    parameters["required"].remove(arg)
            return parameters, strict
    return _parameters(name, {key: value for key, value in fields.items() if key not in skip})


def _parameters(name: str, fields: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """(parameters schema, strict): pydantic's schema of the fields, made strict when it can be."""
    try:
        model = create_model(f"{name}_args", __base__=BaseModel, __config__=ConfigDict(), **fields)
        parameters = model.model_json_schema()
    except Exception as exc:
        raise ConfigError(
            f"Tool {name!r}: its parameters cannot be expressed as JSON schema ({type(exc).__name__}: {exc}). "
            "Use str, int, float, bool, list, dict, Literal, an Enum or a pydantic model."
        ) from exc
    try:
        candidate = copy.deepcopy(parameters)  # `parameters` stays the non-strict fallback
        return _strict(candidate, candidate), True
    except (_NotStrict, KeyError, TypeError, RecursionError):  # 0.1.x raised: send it non-strict
        return parameters, False
