"""Chat templates chosen at serve or train time: a file, a template shipped here, or a model's own.

Some instruct models' templates drop ``tools`` (SmolLM2's renders the chat as if none were
offered), so the model never sees a schema and no tool call can happen. vLLM's answer is
``--chat-template FILE`` plus ``--tool-call-parser NAME``; ours takes the same two options
(`vf-serve`, `vf-vllm`, vf-train's ``chat_template`` and ``tool_call_parser``) with the same
meaning, and a registry entry may name a shipped template as its tool template, used when no
option is given. Every backend sets the chosen text as the tokenizer's ``chat_template``, so the
trainer, the embedded engine and vLLM render the same prompt ids.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from verifiers.errors import ConfigError
from verifiers.models.shipped import SHIPPED as SHIPPED  # re-exported: the option's names
from verifiers.models.shipped import shipped_path as shipped_path

TOOL_CALL_PARSERS = ("hermes",)
"""Tool-call formats the embedded server parses (vLLM's names): ``<tool_call>{json}</tool_call>``."""


def _inline(spec: str) -> bool:
    return "{{" in spec or "{%" in spec


def _file(spec: str) -> Path | None:
    """``spec`` as an existing file, else None (a long inline template is not a path the OS can stat)."""
    try:
        path = Path(spec).expanduser()
        return path if path.is_file() else None
    except OSError:
        return None


def load_chat_template(spec: str) -> str:
    """The Jinja text ``spec`` names: a shipped template's name, the template itself, or a file.

    vLLM's ``--chat-template`` also takes the template inline; a string holding ``{{`` or ``{%``
    is taken as one.
    """
    if spec in SHIPPED:
        return shipped_path(spec).read_text()
    if _inline(spec):
        return spec
    path = _file(spec)
    if path is None:
        raise ConfigError(f"chat template {spec!r} is neither a file, a Jinja template nor a shipped template "
                          f"({', '.join(sorted(SHIPPED))})")
    text = path.read_text()
    if not _inline(text):
        raise ConfigError(f"chat template file {path} holds no Jinja ({{{{ or {{%}}: pass a Jinja chat template")
    return text


def template_file(spec: str) -> Path | None:
    """A path that holds ``spec``'s template, for programs that take a file (vLLM); None for inline text."""
    if spec in SHIPPED:
        return shipped_path(spec)
    return None if _inline(spec) else _file(spec)


def vllm_chat_template(model: str | Path, explicit: str | None) -> str | None:
    """The file vLLM's ``--chat-template`` is given for ``model``: the explicit option's file (a
    shipped name becomes its file), else the text `resolve_chat_template` gives the other backends
    (inline Jinja, or the registry's tool template) written to a file in the model cache; None
    keeps the model's own. A file, because vLLM reads inline templates through an escape decoder."""
    if explicit:
        load_chat_template(explicit)  # an unknown name or a file without Jinja fails here, in our words
        found = template_file(explicit)
        if found is not None:
            return str(found)
    text, _ = resolve_chat_template(model, explicit)
    if text is None:
        return None
    from verifiers.models.cache import cache_root

    path = cache_root() / "templates" / f"{hashlib.sha256(text.encode()).hexdigest()[:16]}.jinja"
    if not path.is_file() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.replace(path)  # atomic: two servers starting at once never read half a file
    return str(path)


def check_tool_call_parser(name: str) -> str:
    if name not in TOOL_CALL_PARSERS:
        raise ConfigError(f"tool call parser {name!r} is not supported; supported: {', '.join(TOOL_CALL_PARSERS)} "
                          "(<tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>, as vLLM's hermes parser)")
    return name


def registry_entry(model: str | Path) -> Any:
    """The registry entry ``model`` names (its name, or its converted directory, recognised by the
    GGUF hash its conversion recorded), or None."""
    from verifiers.models.gguf import SOURCE_FILE
    from verifiers.models.registry import KNOWN

    entry = KNOWN.get(str(model))
    if entry is not None:
        return entry
    try:
        digest = json.loads((Path(str(model)).expanduser() / SOURCE_FILE).read_text()).get("sha256")
    except (OSError, ValueError, AttributeError):
        return None
    return next((e for e in KNOWN.values() if e.gguf_sha256 == digest), None)


def registry_template(model: str | Path) -> tuple[str, str] | None:
    """``(text, name)`` of the registry model's shipped tool template, with the entry's default
    system message set in it; None when ``model`` is not a registry model or has no tool template."""
    entry = registry_entry(model)
    if entry is None or entry.tool_template is None:
        return None
    text = load_chat_template(entry.tool_template)
    if entry.default_system is not None:
        text = "{%- set default_system = " + json.dumps(entry.default_system) + " -%}\n" + text
    return text, entry.tool_template


def resolve_chat_template(model: str | Path, explicit: str | None) -> tuple[str | None, str | None]:
    """``(template text, where it came from)`` for ``model``: the explicit option, else the registry
    entry's tool template, else ``(None, None)`` (the tokenizer's own template is kept)."""
    if explicit:
        return load_chat_template(explicit), explicit
    found = registry_template(model)
    if found is None:
        return None, None
    return found[0], f"{found[1]} (the registry's tool template for this model)"


def use_chat_template(tokenizer: Any, template: str | None) -> Any:
    """Set ``template`` as the tokenizer's chat template (None keeps its own); returns the tokenizer."""
    if template is not None:
        tokenizer.chat_template = template
    return tokenizer
