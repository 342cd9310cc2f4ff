"""verifiers: environments, rubrics and a rollout engine for training and evaluating LLM agents.

``import verifiers as vf`` gives the whole authoring API. Nothing here imports
torch; the trainer lives in the separate ``trainers`` package.
"""

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
from verifiers.parsers import Parser, ThinkParser, XMLParser, extract_boxed_answer
from verifiers.rollout import RolloutInput, run_rollouts
from verifiers.rubrics import JudgeRubric, MathRubric, Rubric, RubricGroup, ToolRubric, group_reward
from verifiers.tools.sandbox import SandboxLimits, python_tool, run_python
from verifiers.tools.schema import tool_schema
from verifiers.types import (
    GenerateOutputs,
    Info,
    Message,
    Messages,
    RolloutError,
    RolloutResult,
    SamplingArgs,
    State,
    TurnTokens,
)

__version__ = "0.2.0"

__all__ = [
    "ChatClient",
    "ConfigError",
    "EnvError",
    "EnvGroup",
    "Environment",
    "GRPOConfig",
    "GRPOTrainer",
    "GenerateOutputs",
    "Info",
    "JudgeError",
    "JudgeRubric",
    "MathRubric",
    "Message",
    "Messages",
    "ModelError",
    "ModelResponse",
    "MultiTurnEnv",
    "OverlongPromptError",
    "Parser",
    "RolloutError",
    "RolloutInput",
    "RolloutResult",
    "RolloutTimeoutError",
    "Rubric",
    "RubricError",
    "RubricGroup",
    "SamplingArgs",
    "SandboxLimits",
    "SingleTurnEnv",
    "State",
    "StatefulToolEnv",
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
    "get_model_and_tokenizer",
    "group_reward",
    "grpo_defaults",
    "load_environment",
    "lora_defaults",
    "make_client",
    "python_tool",
    "run_python",
    "run_rollouts",
    "tool_schema",
]


_TRAINING_NAMES = ("GRPOConfig", "GRPOTrainer", "get_model_and_tokenizer", "grpo_defaults", "lora_defaults")


def __getattr__(name: str):
    """0.1.x training names: imported only when used, so ``import verifiers`` never imports torch."""
    if name in _TRAINING_NAMES:
        import importlib.util

        missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
        if missing:
            raise ImportError(
                f"verifiers.{name} needs the train extra ({', '.join(missing)} missing): pip install 'verifiers[train]'"
            )
        from verifiers.compat import training

        return getattr(training, name)
    raise AttributeError(f"module 'verifiers' has no attribute {name!r}")
