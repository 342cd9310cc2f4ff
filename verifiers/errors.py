"""One small error hierarchy for everything verifiers raises or records.

Every error that can end a rollout is recorded on the `RolloutResult` by its
class name (``error.type``), so keep the tree shallow and the names meaningful:
users filter and count results by them.
"""

from __future__ import annotations


class VFError(Exception):
    """Base class of every error verifiers raises on purpose."""


# -- model / inference server ------------------------------------------------------------
class ModelError(VFError):
    """The inference server failed to produce a usable response."""


class OverlongPromptError(ModelError):
    """The prompt does not fit the model's context window.

    Not a failure of the rollout: the engine ends it as truncated with stop reason
    ``prompt_too_long``.
    """


class ModelTimeoutError(ModelError):
    """A single model request exceeded its timeout (after retries)."""


class RateLimitError(ModelError):
    """The server kept answering 429 after every retry."""


class ServerError(ModelError):
    """The server kept answering 5xx (or dropped the connection) after every retry."""


class ServerUnreachableError(ServerError):
    """The server could not be reached at all (connection refused or dropped): it is down, not failing."""


class WeightSyncError(ServerError):
    """After a weight sync, the server's policy is not the trainer's (a verified sync failed)."""


class BadRequestError(ModelError):
    """The server rejected the request (4xx other than 429 / overlong prompt)."""


class EmptyResponseError(ModelError):
    """The server answered 200 with no choices or an unparseable body."""


# -- tools ---------------------------------------------------------------------------------
class ToolError(VFError):
    """A tool call could not be carried out. Reported back to the model as the tool message."""


class ToolArgumentsError(ToolError):
    """The model's tool-call arguments were not valid JSON or did not match the signature."""


class ToolNotFoundError(ToolError):
    """The model called a tool that the environment does not offer."""


class ToolTimeoutError(ToolError):
    """A tool call ran past its time limit."""


class ToolExecutionError(ToolError):
    """The tool function itself raised."""


# -- environments, rubrics, configuration -------------------------------------------------
class EnvError(VFError):
    """An environment hook (setup_state, env_response, is_completed, ...) raised."""


class UnknownTaskError(EnvError, KeyError):
    """A task no environment of an `EnvGroup` is named after.

    Also a `KeyError`: 0.1.x's ``EnvGroup.rollout`` looked the task up in a dict.
    """

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class RolloutTimeoutError(EnvError):
    """A whole rollout ran past its per-rollout timeout."""


class AgentError(EnvError):
    """An agent program (`AgentEnv`) could not be started or did not do its job."""


class AgentCrashedError(AgentError):
    """The agent program exited with a non-zero status (its stderr tail is in the message)."""


class AgentIsolationError(AgentError):
    """``AgentEnv(isolation="require")`` could not isolate the program on this machine (nothing ran);
    the message names each missing protection and how to get it."""


class AgentNoCallsError(AgentError):
    """The agent program ended without calling the model once: nothing to score or train on."""


class RubricError(VFError):
    """A reward function raised; recorded on the rollout, that function scores 0."""


class JudgeError(RubricError):
    """The judge model failed or answered something unparseable."""


class ConfigError(VFError, ValueError):
    """Bad user input: a missing dataset, an unknown option, a bad argument. The message says how to fix it."""


class EndpointCheckError(ConfigError):
    """The endpoint failed the check before an evaluation: unreachable, wrong URL, refused key, unknown model.

    A `ConfigError` because the fix is always in the command line (``-b``, ``-m``, ``-k``),
    and because running hundreds of rollouts against it would only record the same error.
    """
