"""Test doubles for environment authors: servers and helpers that stand in for real models."""

from verifiers.testing.check import CheckReport, EnvironmentCheckError, a_check_environment, check_environment
from verifiers.testing.scripted_client import RecordedCall, ScriptedClient
from verifiers.testing.server import (
    ScriptedReply,
    ScriptedServer,
    ScriptedToolCall,
    ServerScript,
    SpawnedServer,
)

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
