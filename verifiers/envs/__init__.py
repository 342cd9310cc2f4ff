"""Environments: datasets, prompt formats, rollout procedures and rubrics."""

from verifiers.envs.env_group import EnvGroup, EnvGroupRubric
from verifiers.envs.environment import Environment
from verifiers.envs.loader import load_environment
from verifiers.envs.multiturn_env import MultiTurnEnv
from verifiers.envs.singleturn_env import SingleTurnEnv
from verifiers.envs.tool_env import StatefulToolEnv, ToolEnv

__all__ = [
    "EnvGroup",
    "EnvGroupRubric",
    "Environment",
    "MultiTurnEnv",
    "SingleTurnEnv",
    "StatefulToolEnv",
    "ToolEnv",
    "load_environment",
]
