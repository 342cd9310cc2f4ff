"""The verifiers v1 authoring surface (``import verifiers.v1 as vf``), on top of our core.

Environment packages written for upstream verifiers 0.4's v1 layer export one `Taskset` subclass;
its tasks carry ``@vf.reward``/``@vf.metric``/``@vf.stop`` methods reading a `Trace`, and its
tools are `Toolset` classes with ``@vf.tool`` methods. `TasksetEnv` runs such a taskset as one
of our environments (the ``null`` harness, in process), and ``verifiers.load_environment`` finds
a taskset package by id. Importing this package registers nothing and starts nothing.
"""

from verifiers.v1.configs import (
    AgentOptions,
    DecoratedFunctionConfig,
    HarnessOptions,
    JudgeConfig,
    RewardFunctionConfig,
    RuntimeConfig,
    TaskConfig,
    TasksetConfig,
    ToolsetConfig,
)
from verifiers.v1.decorators import metric, reward, stop, tool
from verifiers.v1.environment import TasksetEnv
from verifiers.v1.judge import Judge, JudgeResponse
from verifiers.v1.loaders import import_taskset, load_taskset
from verifiers.v1.messages import (
    AssistantMessage,
    Message,
    Messages,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from verifiers.v1.rubric import TasksetRubric
from verifiers.v1.state import State
from verifiers.v1.task import Task, TaskData, TaskResources, TaskTimeout
from verifiers.v1.taskset import Taskset
from verifiers.v1.toolset import Toolset
from verifiers.v1.trace import Error, ModelCall, Reward, Trace, TraceTask

__all__ = [
    "AgentOptions",
    "AssistantMessage",
    "DecoratedFunctionConfig",
    "Error",
    "HarnessOptions",
    "Judge",
    "JudgeConfig",
    "JudgeResponse",
    "Message",
    "Messages",
    "ModelCall",
    "Reward",
    "RewardFunctionConfig",
    "RuntimeConfig",
    "State",
    "SystemMessage",
    "Task",
    "TaskConfig",
    "TaskData",
    "TaskResources",
    "TaskTimeout",
    "Taskset",
    "TasksetConfig",
    "TasksetEnv",
    "TasksetRubric",
    "ToolCall",
    "ToolMessage",
    "Toolset",
    "ToolsetConfig",
    "Trace",
    "TraceTask",
    "UserMessage",
    "import_taskset",
    "load_taskset",
    "metric",
    "reward",
    "stop",
    "tool",
]
