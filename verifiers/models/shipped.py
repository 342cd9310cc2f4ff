"""The chat templates shipped with verifiers (``verifiers/models/templates/``), by name.

A leaf module: the registry names a template for a conversion and `verifiers.models.gguf` reads
it, while `verifiers.models.chat_templates` (which looks models up in the registry) resolves
the ``--chat-template`` option; keeping the file table here lets all three use it without an
import cycle.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from verifiers.errors import ConfigError

SHIPPED: dict[str, str] = {"chatml-tools": "chatml_tools.jinja", "gemma3": "gemma3.jinja"}
"""Templates written here, by the name a flag or config uses. ``gemma3`` writes Gemma 3's turn format
(our own template of it: it renders what google/gemma-3-*-it's renders for text, checked in
tests/models/test_chat_templates.py), for Gemma GGUF files that carry no template; it renders no tools."""


def shipped_path(name: str) -> Path:
    """The file of the shipped template ``name`` (a real path, so vLLM can be handed it)."""
    if name not in SHIPPED:
        raise ConfigError(f"no shipped chat template {name!r}; shipped: {', '.join(sorted(SHIPPED))}")
    return Path(str(resources.files("verifiers.models") / "templates" / SHIPPED[name]))
