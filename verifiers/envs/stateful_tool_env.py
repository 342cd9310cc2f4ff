"""0.1.x path ``verifiers.envs.stateful_tool_env``."""

from verifiers.envs.tool_env import StatefulToolEnv

__all__ = ["StatefulToolEnv"]
