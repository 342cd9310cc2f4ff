"""Config files in, validated pydantic models out: one TOML reader, one override parser, one explainer.

Every config of the project (vf-train's `TrainConfig`, the hub config, the endpoints registry)
is a pydantic model with ``extra="forbid"``: a misspelt key must stop the run, not fall back
to a default. This module turns such failures into one-line answers: which key, which file,
and, for an unknown key, the closest names the model does know ("did you mean").

- `load_toml`: a TOML file to a dict; a missing file or bad syntax is a `ConfigError`.
- `parse_overrides`: ``--key value`` / ``--key=value`` / ``--a.b value`` to a nested dict.
- `merge`: overrides on top of a file's values (tables merge key by key).
- `explain`: a `ValidationError` to one line per problem; `validate` raises them as one message.
"""

from __future__ import annotations

import difflib
import json
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import AliasChoices, BaseModel, ValidationError

from verifiers.errors import ConfigError

__all__ = ["explain", "load_toml", "merge", "parse_overrides", "unknown_key", "validate"]

M = TypeVar("M", bound=BaseModel)


def load_toml(
    path: str | Path,
    *,
    missing: str = "{path} does not exist",
    invalid: str = "{path} is not valid TOML: {error}",
) -> dict[str, Any]:
    """The parsed file; ``missing`` and ``invalid`` word the `ConfigError` (``{path}``, ``{error}``).

    The wording is the caller's because each file has its own fix to point at (the
    examples folder, the ``-e`` flag, what a hub config holds).
    """
    p = Path(path)
    if not p.is_file():
        raise ConfigError(missing.format(path=str(p)))
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(invalid.format(path=str(p), error=exc)) from None


def _parse_value(raw: str) -> Any:
    """CLI values: JSON when it parses (numbers, booleans, lists, objects), else the string."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        lowered = raw.lower()
        if lowered in ("true", "false"):
            return lowered == "true"
        return raw


def parse_overrides(args: list[str]) -> dict[str, Any]:
    """``["--learning_rate", "1e-3", "--tiny_model.hidden_size=128"]`` → nested dict."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--"):
            raise ConfigError(f"unexpected argument {arg!r}: overrides look like --key value or --key=value")
        key = arg[2:].replace("-", "_")
        if "=" in key:
            key, raw = key.split("=", 1)
            i += 1
        else:
            if i + 1 >= len(args):
                raise ConfigError(f"--{key} needs a value")
            raw = args[i + 1]
            i += 2
        node = out
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = _parse_value(raw)
    return out


def merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` on top of ``base``; a table in both is merged key by key, anything else replaced."""
    merged = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(merged.get(k), dict):
            merged[k] = merge(merged[k], v)
        else:
            merged[k] = v
    return merged


def _input_names(model: type[BaseModel]) -> list[str]:
    """The keys ``model`` accepts: field names, plus their aliases (``url`` for ``base_url``)."""
    names = set(model.model_fields)
    for field in model.model_fields.values():
        if isinstance(field.alias, str):
            names.add(field.alias)
        alias = field.validation_alias
        if isinstance(alias, str):
            names.add(alias)
        elif isinstance(alias, AliasChoices):
            names.update(c for c in alias.choices if isinstance(c, str))
    return sorted(names)


def _known_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The keys allowed next to the unknown one at ``loc`` (top level, or inside a nested table)."""
    for part in loc[:-1]:
        field = model.model_fields.get(str(part))
        if field is None:
            return []
        inner = [a for a in (field.annotation, *getattr(field.annotation, "__args__", ()))
                 if isinstance(a, type) and issubclass(a, BaseModel)]
        if not inner:
            return []
        model = inner[0]
    return _input_names(model)


def unknown_key(model: type[BaseModel], loc: tuple[Any, ...], *, docs: str | None = None) -> str:
    """``unknown key 'x'`` with the closest known names, not a list of every key.

    With nothing close, the hint is ``docs`` (where every key is listed) or, for a model
    without such a page, its few keys.
    """
    where = ".".join(str(p) for p in loc)
    known = _known_keys(model, loc)
    word = str(loc[-1])
    close = difflib.get_close_matches(word, known, n=3, cutoff=0.6)
    # only the near-best: 'learning_rat' is 'learning_rate', not also 'sft_warmup_learning_rate'
    score = {c: difflib.SequenceMatcher(None, word, c).ratio() for c in close}
    close = [c for c in close if score[c] >= max(score.values(), default=0.0) - 0.15]
    prefix = ".".join(str(p) for p in loc[:-1])
    names = [f"{prefix}.{c}" if prefix else c for c in close]
    if names:
        hint = "did you mean " + " or ".join(repr(n) for n in names) + "?"
    elif docs is not None:
        hint = f"every key is listed in {docs}"
    else:
        hint = "the keys are " + ", ".join(repr(k) for k in known)
    return f"unknown key {where!r}: {hint}"


def explain(exc: ValidationError, model: type[BaseModel], *, docs: str | None = None) -> list[str]:
    """One line per problem: ``unknown key ...`` (see `unknown_key`) or ``where: what is wrong``."""
    lines = []
    for err in exc.errors():
        loc = tuple(err.get("loc", ()))
        where = ".".join(str(p) for p in loc) or "config"
        if err.get("type") == "extra_forbidden" and loc:
            lines.append(unknown_key(model, loc, docs=docs))
        else:
            lines.append(f"{where}: {err.get('msg')}")
    return lines


def validate(model: type[M], data: Any, what: str, *, docs: str | None = None) -> M:
    """``model`` built from ``data``, or a `ConfigError` ``invalid <what>:`` listing every problem."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"invalid {what}:\n  " + "\n  ".join(explain(exc, model, docs=docs))) from None
