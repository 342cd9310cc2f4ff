"""verifiers: environments, rubrics and a rollout engine for training and evaluating LLM agents.

``import verifiers as vf`` gives the whole authoring API. Nothing here imports
torch; the trainer lives in the separate ``trainers`` package.
"""

import importlib
from typing import TYPE_CHECKING, Any

from verifiers.clients import ChatClient, ModelResponse, as_chat_client, make_client
from verifiers.envs import (
    EnvGroup,
    Environment,
    MultiTurnEnv,
    SingleTurnEnv,
    StatefulToolEnv,
    ToolEnv,
    load_environment,
)
from verifiers.errors import (
    ConfigError,
    EnvError,
    JudgeError,
    ModelError,
    OverlongPromptError,
    RolloutTimeoutError,
    RubricError,
    ToolError,
    VFError,
)
from verifiers.parsers import Parser, ThinkParser, XMLParser, extract_boxed_answer, reply_text, strip_markup
from verifiers.rollout import RolloutInput, run_rollouts
from verifiers.rubrics import JudgeRubric, MathRubric, Rubric, RubricGroup, ToolRubric, group_reward
from verifiers.tools.sandbox import SandboxLimits, python_tool, run_python, run_python_sync
from verifiers.tools.schema import tool_schema
from verifiers.types import (
    ChatCompletion,
    ChatCompletionMessageParam,
    ChatCompletionMessageToolCall,
    ChatCompletionRole,
    ChatCompletionToolParam,
    ChatMessage,
    Completion,
    Endpoint,
    Endpoints,
    FunctionDefinition,
    FunctionParameters,
    GenerateInputs,
    GenerateOutputs,
    Info,
    JsonPrimitive,
    Message,
    Messages,
    MessageType,
    ProcessedOutputs,
    RewardFunc,
    RolloutError,
    RolloutResult,
    RolloutScore,
    RolloutScores,
    SamplingArgs,
    State,
    TurnTokens,
)
from verifiers.utils.data_utils import extract_hash_answer, load_example_dataset
from verifiers.utils.logging_utils import print_prompt_completions_sample, setup_logging

# "+vf" is a PEP 440 local label: PyPI refuses uploads with one, so upstream's `verifiers` (a
# different project under the same name: 0.1.x to 0.4.0, including a 0.2.0) can never publish
# this version, and `verifiers==0.2.0+vf` (what vf-install pins) only matches this toolkit.
__version__ = "0.2.0+vf"

# Names whose modules are only imported when used (0.1.x optional packages, subprocess sandboxes,
# MCPToolEnv of the mcp extra).
_LAZY_IMPORTS = {
    "AgentEnv": "verifiers.envs.agent_env:AgentEnv",
    "InterceptionGateway": "verifiers.gateway:InterceptionGateway",
    "MCPToolEnv": "verifiers.envs.mcp_env:MCPToolEnv",
    "PythonEnv": "verifiers.envs.python_env:PythonEnv",
    "SandboxEnv": "verifiers.envs.sandbox_env:SandboxEnv",
    "TextArenaEnv": "verifiers.envs.textarena_env:TextArenaEnv",
    # 0.1.x training names: only when used, so ``import verifiers`` never imports torch
    "GRPOConfig": "verifiers.compat.training:GRPOConfig",
    "GRPOTrainer": "verifiers.compat.training:GRPOTrainer",
    "get_model_and_tokenizer": "verifiers.compat.training:get_model_and_tokenizer",
    "grpo_defaults": "verifiers.compat.training:grpo_defaults",
    "lora_defaults": "verifiers.compat.training:lora_defaults",
}


def __getattr__(name: str) -> Any:
    target = _LAZY_IMPORTS.get(name)
    if target is None:
        raise AttributeError(f"module 'verifiers' has no attribute {name!r}")
    if target.startswith("verifiers.compat.training:"):
        from importlib.util import find_spec

        missing = [m for m in ("torch", "transformers") if find_spec(m) is None]
        if missing:
            from verifiers.install_hint import install_command

            raise ImportError(
                f"verifiers.{name} needs the train extra ({', '.join(missing)} missing): {install_command('train')}"
            )
    module, attr = target.split(":")
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from verifiers.envs.agent_env import AgentEnv
    from verifiers.envs.mcp_env import MCPToolEnv
    from verifiers.envs.python_env import PythonEnv
    from verifiers.envs.sandbox_env import SandboxEnv
    from verifiers.envs.textarena_env import TextArenaEnv
    from verifiers.gateway import InterceptionGateway

__all__ = [
    "AgentEnv",
    "ChatClient",
    "ChatCompletion",
    "ChatCompletionMessageParam",
    "ChatCompletionMessageToolCall",
    "ChatCompletionRole",
    "ChatCompletionToolParam",
    "ChatMessage",
    "Completion",
    "ConfigError",
    "Endpoint",
    "Endpoints",
    "EnvError",
    "EnvGroup",
    "Environment",
    "FunctionDefinition",
    "FunctionParameters",
    "GRPOConfig",
    "GRPOTrainer",
    "GenerateInputs",
    "GenerateOutputs",
    "Info",
    "InterceptionGateway",
    "JsonPrimitive",
    "JudgeError",
    "JudgeRubric",
    "MCPToolEnv",
    "MathRubric",
    "Message",
    "MessageType",
    "Messages",
    "ModelError",
    "ModelResponse",
    "MultiTurnEnv",
    "OverlongPromptError",
    "Parser",
    "ProcessedOutputs",
    "PythonEnv",
    "RewardFunc",
    "RolloutError",
    "RolloutInput",
    "RolloutResult",
    "RolloutScore",
    "RolloutScores",
    "RolloutTimeoutError",
    "Rubric",
    "RubricError",
    "RubricGroup",
    "SamplingArgs",
    "SandboxEnv",
    "SandboxLimits",
    "SingleTurnEnv",
    "State",
    "StatefulToolEnv",
    "TextArenaEnv",
    "ThinkParser",
    "ToolEnv",
    "ToolError",
    "ToolRubric",
    "TurnTokens",
    "VFError",
    "XMLParser",
    "__version__",
    "as_chat_client",
    "extract_boxed_answer",
    "extract_hash_answer",
    "get_model_and_tokenizer",
    "group_reward",
    "grpo_defaults",
    "load_environment",
    "load_example_dataset",
    "lora_defaults",
    "make_client",
    "print_prompt_completions_sample",
    "python_tool",
    "reply_text",
    "run_python",
    "run_python_sync",
    "run_rollouts",
    "setup_logging",
    "strip_markup",
    "tool_schema",
]

