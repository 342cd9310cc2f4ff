"""Test doubles for environment authors: servers and helpers that stand in for real models.

The names are imported on first use, not with the package: ``python -m
verifiers.testing.server`` (a scripted server for trying vf-eval offline) must find
its module not yet imported, or runpy warns that it may run twice.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from verifiers.testing.check import (
        CheckReport,
        EnvironmentCheckError,
        a_check_environment,
        check_environment,
    )
    from verifiers.testing.script import ScriptedReply, ScriptedToolCall, ServerScript
    from verifiers.testing.scripted_client import RecordedCall, ScriptedClient
    from verifiers.testing.server import ScriptedServer
    from verifiers.testing.spawn import SpawnedServer

_HOMES = {
    "CheckReport": "check",
    "EnvironmentCheckError": "check",
    "a_check_environment": "check",
    "check_environment": "check",
    "RecordedCall": "scripted_client",
    "ScriptedClient": "scripted_client",
    "ScriptedReply": "script",
    "ScriptedServer": "server",
    "ScriptedToolCall": "script",
    "ServerScript": "script",
    "SpawnedServer": "spawn",
}

__all__ = [
    "CheckReport",
    "EnvironmentCheckError",
    "RecordedCall",
    "ScriptedClient",
    "ScriptedReply",
    "ScriptedServer",
    "ScriptedToolCall",
    "ServerScript",
    "SpawnedServer",
    "a_check_environment",
    "check_environment",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'verifiers.testing' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"verifiers.testing.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])
