"""EnvGroup: several environments behind one dataset, routed by ``task``.

Datasets are concatenated with ``task`` set to each environment's name (``env_0``,
``env_1``, ... unless ``env_names`` is given, as in 0.1.x); rollouts and scoring are
delegated to the environment that owns the task. Metrics of one environment are
reported as 0 for rollouts of another.

An unknown task behaves as in 0.1.x where 0.1.x code can see it: ``rollout`` raises
(`UnknownTaskError`, a `KeyError` too), ``get_env_for_task`` falls back to the first
environment and the rubric scores 0 for every metric, both with a warning.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from verifiers._helpers import maybe_await
from verifiers.envs.environment import Environment, _FormattedDataset
from verifiers.errors import ConfigError, UnknownTaskError
from verifiers.rubrics.rubric import Rubric
from verifiers.types import Info, Messages, RolloutScore, SamplingArgs, State

logger = logging.getLogger(__name__)


def _unknown_task(task: str, env_map: dict[str, Environment]) -> str:
    return f"no environment for task {task!r}; known tasks: {sorted(env_map)}"


class EnvGroupRubric(Rubric):
    def __init__(self, env_map: dict[str, Environment]) -> None:
        super().__init__()
        self.env_map = env_map

    def _rubric(self, task: str) -> Rubric | None:
        env = self.env_map.get(task)
        if env is None:
            logger.warning("%s: every metric scores 0", _unknown_task(task, self.env_map))
            return None
        return env.rubric

    def get_reward_func_names(self) -> list[str]:
        names: list[str] = []
        for env in self.env_map.values():
            names.extend(n for n in env.rubric.get_reward_func_names() if n not in names)
        return names

    @property
    def all_reward_names(self) -> list[str]:
        """Every environment's reward function names, unique and sorted (0.1.x's attribute; read live,
        so functions added to a member rubric later are included)."""
        return sorted(self.get_reward_func_names())

    @property
    def has_group_funcs(self) -> bool:
        return any(e.rubric.has_group_funcs for e in self.env_map.values())

    async def score_rollout(self, *args: Any, task: str = "default", **kwargs: Any) -> RolloutScore:
        rubric = self._rubric(task)
        # 0.1.x: an unknown task scores 0 for every metric (a warning, not an error)
        score = await rubric.score_rollout(*args, task=task, **kwargs) if rubric is not None else RolloutScore()
        for name in self.get_reward_func_names():
            score.metrics.setdefault(name, 0.0)
        return score

    async def score_group(self, rollouts: Sequence[dict[str, Any]], scores: list[RolloutScore]) -> None:
        rubric = self._rubric(rollouts[0].get("task", "default")) if rollouts else None
        if rubric is not None:
            await rubric.score_group(rollouts, scores)


class EnvGroup(Environment):
    def __init__(self, envs: Sequence[Environment], env_names: Sequence[str] | None = None, **kwargs: Any) -> None:
        # ConfigError is a ValueError, as 0.1.x raised; the messages start with 0.1.5's words
        if not envs:
            raise ConfigError("EnvGroup requires at least one environment: pass envs=[env, ...]")
        names = list(env_names) if env_names else [f"env_{i}" for i in range(len(envs))]
        if len(names) != len(envs):
            raise ConfigError(
                f"Number of env_names must match number of envs: got {len(envs)} environments and "
                f"{len(names)} env_names; give one name per environment"
            )
        if len(set(names)) != len(names):
            raise ConfigError(f"EnvGroup needs one unique name per environment; env_names={names}")
        self.envs = list(envs)
        self.env_names = names
        self.env_map = dict(zip(names, envs, strict=True))
        train = self._concat(lambda e: e.dataset)
        evals = self._concat(lambda e: e.eval_dataset if e.eval_dataset is not None else e.dataset)
        super().__init__(
            dataset=train,
            eval_dataset=evals,
            rubric=EnvGroupRubric(self.env_map),
            message_type=envs[0].message_type,
            **kwargs,
        )

    def _concat(self, pick: Any) -> list[dict[str, Any]] | None:
        rows: list[dict[str, Any]] = []
        for name, env in self.env_map.items():
            data = pick(env)
            if isinstance(data, _FormattedDataset):
                rows.extend({**r, "task": name} for r in data.rows)
        for i, r in enumerate(rows):
            r["example_id"] = i
        return rows or None

    def get_env_for_task(self, task: str) -> Environment:
        """The environment named ``task``; the first one (with a warning) for an unknown task, as 0.1.x."""
        env = self.env_map.get(task)
        if env is None:
            logger.warning("%s: using the first environment, %r", _unknown_task(task, self.env_map), self.env_names[0])
            return self.envs[0]
        return env

    def _env(self, task: str) -> Environment:
        env = self.env_map.get(task)
        if env is None:
            raise UnknownTaskError(_unknown_task(task, self.env_map))
        return env

    async def rollout(
        self,
        client: Any,
        model: str,
        prompt: Messages,
        answer: str = "",
        task: str = "default",
        info: Info | None = None,
        sampling_args: SamplingArgs | None = None,
        **kwargs: Any,
    ) -> tuple[Messages, State]:
        env = self._env(task)
        return await env.rollout(
            client, model, prompt, answer, task, info, self.merge_sampling_args(sampling_args), **kwargs
        )

    async def cleanup_state(self, state: State) -> None:
        env = self.env_map.get(state.get("task", ""))
        if env is not None:
            await env.cleanup_state(state)

    async def release_state(self, state: State) -> None:
        release = getattr(self.env_map.get(state.get("task", "")), "release_state", None)
        if release is not None:
            await maybe_await(release(state))

    def use_tokenizer(self, tokenizer: Any) -> None:
        for env in self.envs:
            env.use_tokenizer(tokenizer)
