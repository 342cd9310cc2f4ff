"""Test doubles for environment authors: servers and helpers that stand in for real models."""

from verifiers.testing.server import (
    ScriptedReply,
    ScriptedServer,
    ScriptedToolCall,
    ServerScript,
    SpawnedServer,
)

__all__ = [
    "ScriptedReply",
    "ScriptedServer",
    "ScriptedToolCall",
    "ServerScript",
    "SpawnedServer",
]
