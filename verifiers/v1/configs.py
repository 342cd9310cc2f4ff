"""The v1 config models: what a taskset, its tasks, toolsets, judges and the agent accept.

Configs cross a boundary (keyword arguments of ``load_environment``, ``vf-eval -a`` JSON), so
they are pydantic models that reject unknown keys: a typo in an override is an error naming
the field, not a silently ignored setting.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, FiniteFloat, model_validator

DEFAULT_JUDGE_URL = "https://api.pinference.ai/api/v1"
"""Upstream's default judge endpoint (Prime Intellect inference: needs an account and key)."""


class BaseConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


class DecoratedFunctionConfig(BaseConfig):
    """A function plugged in by config in place of (or beside) a decorated task method."""

    fn: str | None = None
    """Import path: ``pkg.module:function``, ``pkg.module.function`` or ``path/to/file.py:function``.
    Unset keeps the task's decorated method of the same name and only changes its options."""
    priority: int | None = None


class RewardFunctionConfig(DecoratedFunctionConfig):
    weight: FiniteFloat | None = None


class JudgeConfig(BaseConfig):
    """An OpenAI-compatible judge endpoint plus prompt and scoring knobs."""

    id: str = ""
    """Plugin id of a plugged judge; empty for a judge that task code calls itself."""
    name: str = ""
    """Reward key of a plugged judge (defaults to the id)."""
    weight: FiniteFloat = 1.0
    model: str = "openai/gpt-4.1-mini"
    base_url: str = DEFAULT_JUDGE_URL
    api_key_var: str = "PRIME_API_KEY"
    """Environment variable holding the API key (read when the judge is called)."""
    headers: dict[str, str] = Field(default_factory=dict)
    timeout: float = 120.0
    sampling: dict[str, Any] = Field(default_factory=dict)
    prompt: Path | None = None
    """File whose text replaces the judge's default prompt template."""


class TaskConfig(BaseConfig):
    """Run-time knobs read by `Task` behaviour; every field needs a default."""

    judges: list[JudgeConfig] = Field(default_factory=list)
    stops: dict[str, DecoratedFunctionConfig] = Field(default_factory=dict)
    metrics: dict[str, DecoratedFunctionConfig] = Field(default_factory=dict)
    rewards: dict[str, RewardFunctionConfig] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _plugged_judges_not_supported(self) -> TaskConfig:
        if self.judges:
            ids = [j.id or "?" for j in self.judges]
            raise ValueError(
                f"plugged judges {ids} are not supported here (upstream resolves them as judge "
                "plugins); call a vf.Judge subclass from a @vf.reward method instead"
            )
        return self


class TasksetConfig(BaseConfig):
    """What a taskset loads. Subclass it for the taskset's own load-time fields."""

    id: str = ""
    task: TaskConfig = Field(default_factory=TaskConfig)
    system_prompt: Path | None = None
    """File whose text replaces every task's ``system_prompt`` when the taskset is iterated."""

    @property
    def name(self) -> str:
        return self.id


class RuntimeConfig(BaseModel):
    """Where a program or tool server runs. Only ``subprocess`` (local) runs here."""

    model_config = ConfigDict(extra="allow")

    type: str = "subprocess"


class ToolsetConfig(BaseConfig):
    colocated: bool = False
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)
    url: str | None = None
    """URL of an already running remote tool server (not supported here)."""


PROGRAMS = {"bash": "verifiers.v1.bash_agent"}
"""The harnesses run here as a local agent program: id -> the module run (``python -m``) by
`verifiers.v1.program_env`. ``null`` is the in-process chat loop; every other id is refused."""


class HarnessOptions(BaseConfig):
    """The harness settings the in-process null harness reads (upstream ``--env.agent.harness``)."""

    id: str = "null"
    tool_timeout: FiniteFloat = Field(600.0, gt=0)
    """Seconds a tool call may take (the ``bash`` harness: one command)."""
    disabled_tools: list[str] | None = None
    edit: bool = True
    """``bash`` harness: offer the ``edit`` tool beside ``bash`` (upstream's default)."""


class TaskMatch(BaseConfig):
    """Tasks named by position in ``load()`` (``5``, ``"0:100"``, ``"7:"``; a comma-separated
    string works too), by ``TaskData.id`` or by ``TaskData.name``; any list naming a task matches."""

    idx: list[int | str] = Field(default_factory=list)
    ids: list[str] = Field(default_factory=list)
    names: list[str] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _split_idx(cls, data: Any) -> Any:
        """``idx="0:10,17"`` (what a command line gives) as ``["0:10", "17"]``."""
        if isinstance(data, dict) and isinstance(data.get("idx"), int | str):
            data = {**data, "idx": [p.strip() for p in str(data["idx"]).split(",") if p.strip()]}
        return data

    @property
    def empty(self) -> bool:
        return not (self.idx or self.ids or self.names)


class SelectOptions(BaseConfig):
    """The ``select`` keyword of ``load_environment`` (upstream ``--select.*``): which tasks run.

    The steps apply in upstream's order: ``include`` keeps tasks, ``exclude`` drops them, then
    ``shuffle`` (under ``seed``), ``skip`` and ``limit`` pick from what is left. A task keeps its
    position in ``load()`` as its example id whatever the selection, so runs stay comparable.
    """

    include: TaskMatch = Field(default_factory=TaskMatch)
    exclude: TaskMatch = Field(default_factory=TaskMatch)
    shuffle: bool = False
    seed: int = 0
    skip: int = Field(0, ge=0)
    limit: int | None = Field(None, ge=1)

    @model_validator(mode="before")
    @classmethod
    def _null_limit(cls, data: Any) -> Any:
        """``limit="null"`` from a command line means no limit, as upstream's None."""
        if isinstance(data, dict) and str(data.get("limit")).lower() in ("null", "none"):
            data = {**data, "limit": None}
        return data


class AgentOptions(BaseConfig):
    """The ``agent`` keyword of ``load_environment`` (upstream ``--env.agent.*``)."""

    harness: HarnessOptions = Field(default_factory=HarnessOptions)
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)
    max_turns: int | None = None
    """Model turns per rollout; None: until the model stops calling tools."""

    @model_validator(mode="before")
    @classmethod
    def _harness_by_id(cls, data: Any) -> Any:
        """Accept ``harness="null"`` and ``runtime="subprocess"`` as shorthands."""
        if isinstance(data, dict):
            data = dict(data)
            if isinstance(data.get("harness"), str):
                data["harness"] = {"id": data["harness"]}
            if isinstance(data.get("runtime"), str):
                data["runtime"] = {"type": data["runtime"]}
        return data
