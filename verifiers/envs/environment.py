"""Environment: a dataset, a prompt format, a rollout procedure and a rubric.

This is the 0.1.x authoring surface (``Environment(dataset=..., system_prompt=...,
parser=..., rubric=...)``, ``env.evaluate(client, model, ...)``,
``env.generate(inputs, client, model, ...)``). Concurrency is not here: the
rollout engine in `verifiers.rollout` runs ``rollout`` once per sample under a
semaphore and scores as rollouts finish.
"""

from __future__ import annotations

import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from verifiers._helpers import set_legacy_attributes
from verifiers.clients.loop import run_sync  # also importable from here, as before (eval/runner.py)
from verifiers.envs.legacy import LegacyEnvironmentMethods
from verifiers.errors import ConfigError
from verifiers.parsers.parser import Parser
from verifiers.rollout.error_report import warn_about_errors
from verifiers.rollout.inputs import RolloutInput
from verifiers.rollout.runner import run_rollouts
from verifiers.rubrics.rubric import Rubric
from verifiers.types import (
    GenerateInputs,
    GenerateOutputs,
    Info,
    Message,
    Messages,
    MessageType,
    RolloutResult,
    SamplingArgs,
    State,
)

logger = logging.getLogger(__name__)


def _clean_message(m: Mapping[str, Any]) -> Message:
    """Drop keys that Arrow filled with None (datasets store messages as structs with a union of keys)."""
    return {k: v for k, v in m.items() if v is not None or k == "content"}


def _parse_info(info: Any) -> Info:
    if info is None or info == "":
        return {}
    if isinstance(info, str):
        try:
            parsed = json.loads(info)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"dataset column 'info' must be a dict or a JSON object string, got {info[:80]!r}") from exc
        if not isinstance(parsed, dict):
            raise ConfigError(f"dataset column 'info' must decode to a JSON object, got {type(parsed).__name__}")
        return parsed
    if isinstance(info, Mapping):
        return dict(info)
    raise ConfigError(f"dataset column 'info' must be a dict or JSON string, got {type(info).__name__}")


def _prompt_mismatch(index: int, message_type: MessageType) -> str:
    if message_type == "completion":
        return (
            f"dataset row {index}: 'prompt' must be a string when message_type is 'completion', got chat messages; "
            "give text prompts or use message_type='chat'"
        )
    return (
        f"dataset row {index}: 'prompt' is a string but message_type is 'chat'; give a list of messages "
        "(or a 'question' column) or use message_type='completion'"
    )


def _to_rows(data: Any) -> list[dict[str, Any]]:
    """Rows from an HF Dataset, a list of dicts, or a dict of columns."""
    if data is None:
        return []
    if hasattr(data, "to_list") and hasattr(data, "column_names"):
        return list(data.to_list())
    if isinstance(data, Mapping):
        cols = {k: list(v) for k, v in data.items()}
        n = len(next(iter(cols.values()), []))
        if any(len(v) != n for v in cols.values()):
            raise ConfigError("inputs given as a dict of columns must have columns of equal length")
        return [{k: v[i] for k, v in cols.items()} for i in range(n)]
    if isinstance(data, Sequence) and not isinstance(data, str):
        rows = list(data)
        if rows and not isinstance(rows[0], Mapping):
            raise ConfigError(f"dataset rows must be dicts, got {type(rows[0]).__name__}")
        return [dict(r) for r in rows]
    raise ConfigError(f"cannot use {type(data).__name__} as a dataset: give a datasets.Dataset or a list of dicts")


class Environment(LegacyEnvironmentMethods, ABC):
    """Base class of all environments. Subclasses implement `rollout` (MultiTurnEnv does)."""

    def __init__(
        self,
        dataset: Any = None,
        eval_dataset: Any = None,
        system_prompt: str | None = None,
        few_shot: list[Message] | None = None,
        parser: Parser | None = None,
        rubric: Rubric | None = None,
        sampling_args: SamplingArgs | None = None,
        message_type: MessageType = "chat",
        max_concurrent: int = -1,
        oai_tools: list[dict[str, Any]] | None = None,
        rollout_timeout_s: float | None = None,
        env_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        # 0.1.x environments had ``self.logger`` (their subclasses log through it), looked up here
        self.logger = logging.getLogger(f"verifiers.envs.{type(self).__name__}")
        if message_type not in ("chat", "completion"):
            raise ConfigError(f"message_type must be 'chat' or 'completion', got {message_type!r}")
        if message_type == "completion" and (system_prompt or few_shot):
            # 0.1.5's error and words: a text prompt has no system role, and any way of joining one
            # (or few-shot messages) to the question would be a guess at the format the model expects
            raise ConfigError(
                'The fields "system_prompt" and "few_shot" are not supported for completion tasks. '
                'Please use message_type="chat" instead, or pre-format your dataset to contain a "prompt" '
                "column (the exact text the model continues)."
            )
        if dataset is None and eval_dataset is None:
            raise ConfigError(
                f"Either dataset or eval_dataset must be provided: {type(self).__name__} got neither; pass "
                "dataset=... (training) and/or eval_dataset=... (evaluation)"
            )
        self.message_type: MessageType = message_type
        self.system_prompt = system_prompt
        self.few_shot = list(few_shot or [])
        self.parser = parser if parser is not None else Parser()
        self.rubric = rubric if rubric is not None else Rubric(parser=self.parser)
        if type(self.parser) is not type(getattr(self.rubric, "parser", self.parser)):
            # 0.1.5's warning, word for word (tests match it); without a rubric it gets this parser
            self.logger.warning("The parser and rubric parser are different. This may cause unexpected behavior.")
        self.sampling_args: SamplingArgs = self._initial_sampling_args(sampling_args)
        self.max_concurrent = max_concurrent
        if oai_tools is not None or not hasattr(self, "oai_tools"):
            self.oai_tools = oai_tools
        self.rollout_timeout_s = rollout_timeout_s
        self.env_id = env_id
        self.dataset = self._format_dataset(dataset) if dataset is not None else None
        self.eval_dataset = self._format_dataset(eval_dataset) if eval_dataset is not None else None
        # 0.1.x stored every extra keyword as an attribute and environments read them back.
        set_legacy_attributes(self, kwargs)

    @staticmethod
    def _initial_sampling_args(sampling_args: SamplingArgs | None) -> SamplingArgs:
        """0.1.x defaults (``n=1``, ``extra_body={}``) with the given args on top, extra_body merged."""
        merged: SamplingArgs = {"n": 1, "extra_body": {}}
        for key, value in (sampling_args or {}).items():
            if key == "extra_body":
                merged["extra_body"].update(value or {})
            else:
                merged[key] = value
        return merged

    # -- datasets ---------------------------------------------------------------------------
    def format_prompt(
        self, prompt: str, system_prompt: str | None = None, few_shot: list[Message] | None = None
    ) -> list[Message]:
        messages: list[Message] = []
        if system_prompt:
            messages.append({"role": "system", "content": system_prompt})
        messages.extend(few_shot or [])
        messages.append({"role": "user", "content": prompt})
        return messages

    def _format_row(self, row: dict[str, Any], index: int, lenient: bool = False) -> dict[str, Any]:
        """One dataset row in the engine's shape. A prompt of the wrong kind for ``message_type``
        (chat messages in completion mode, text in chat mode) raises, or with ``lenient`` is kept."""
        prompt = row.get("prompt")
        if prompt is None:
            if "question" not in row:
                raise ConfigError(
                    f"dataset row {index} has neither 'prompt' (chat messages) nor 'question' (text); "
                    f"columns present: {sorted(row)}"
                )
            question = str(row["question"])
            if self.message_type == "chat":
                prompt = self.format_prompt(question, self.system_prompt, self.few_shot)
            else:
                prompt = question
        elif isinstance(prompt, str) != (self.message_type == "completion"):
            if not lenient:
                raise ConfigError(_prompt_mismatch(index, self.message_type))
            # kept as it is (0.1.x built such an environment too): `rollout` refuses the row
        elif self.message_type == "chat":
            prompt = [_clean_message(m) for m in prompt]
        example_id = row.get("example_id", row.get("id", index))
        if not isinstance(example_id, int):
            example_id = index
        return {
            **row,
            "prompt": prompt,
            "answer": "" if row.get("answer") is None else str(row["answer"]),
            "task": row.get("task") or "default",
            "info": _parse_info(row.get("info")),
            "example_id": example_id,
        }

    def _format_dataset(self, data: Any) -> Any:
        """Validate and format rows (prompt built from question, info parsed, example ids added).

        An HF ``Dataset`` stays an HF ``Dataset`` (users call ``.select``/``.map`` on
        ``env.dataset``); the formatted rows are cached for the engine.
        """
        rows = [self._format_row(r, i, lenient=True) for i, r in enumerate(_to_rows(data))]
        if not rows:
            raise ConfigError("the dataset is empty")
        wrong = [i for i, r in enumerate(rows) if isinstance(r["prompt"], str) != (self.message_type == "completion")]
        if wrong:
            # A warning, not an error: 0.1.x built such an environment (its tests use one to check
            # process_env_results), and only a rollout of such a row cannot work; `rollout` refuses it.
            logger.warning(
                "%s; %d of %d rows are like this and their rollouts will fail",
                _prompt_mismatch(wrong[0], self.message_type),
                len(wrong),
                len(rows),
            )
        return _FormattedDataset(rows, data)

    def get_dataset(self, n: int = -1, seed: int | None = None) -> Any:
        """The first ``n`` training rows (all for ``n <= 0``), shuffled by ``seed`` first if given.

        A ``datasets.Dataset`` with the formatted columns (``prompt``, ``answer``, ``task``,
        ``info`` as JSON text, ``example_id``, ``id``, plus the dataset's own columns).
        """
        if self.dataset is None:
            raise ConfigError(f"{type(self).__name__} has no training dataset (only eval_dataset)")
        return self.dataset.subset(n, seed).as_hf()

    def get_eval_dataset(self, n: int = -1, seed: int | None = None) -> Any:
        """As `get_dataset`, from the eval split (or the training split when there is none)."""
        if self.eval_dataset is None:
            return self.get_dataset(n, seed)
        return self.eval_dataset.subset(n, seed).as_hf()

    def use_tokenizer(self, tokenizer: Any) -> None:
        """Called by the trainer with the policy's tokenizer. Nothing to do by default;
        `AgentEnv` uses it to send an agent program's later calls as exact token ids."""
        return None

    def get_reward_funcs(self) -> list[Any]:
        return self.rubric.get_reward_funcs()

    def get_reward_weights(self) -> list[float]:
        return self.rubric.get_reward_weights()

    # -- rollouts ---------------------------------------------------------------------------
    @abstractmethod
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
        """Run one episode; return ``(completion, state)``."""

    async def cleanup_state(self, state: State) -> None:
        """Called once after every rollout, also after errors, timeouts and Ctrl-C. Release resources here."""
        return None

    def merge_sampling_args(self, sampling_args: SamplingArgs | None) -> SamplingArgs:
        merged = dict(self.sampling_args)
        if sampling_args:
            extra = {**(merged.get("extra_body") or {}), **(sampling_args.get("extra_body") or {})}
            merged.update(sampling_args)
            merged.pop("extra_body", None)
            if extra:
                merged["extra_body"] = extra
        return merged

    @staticmethod
    def build_inputs(
        rows: Sequence[Mapping[str, Any]],
        rollouts_per_example: int = 1,
        first_group_id: int = 0,
        dataset_order: bool = False,
    ) -> list[RolloutInput]:
        """One group of ``rollouts_per_example`` samples per row, with fresh group ids.

        Samples of a group are adjacent (a,a,b,b); ``dataset_order=True`` repeats the
        whole dataset instead (a,b,a,b), the order 0.1.x's ``evaluate`` returned.
        """
        if rollouts_per_example < 1:
            raise ConfigError(f"rollouts_per_example must be >= 1, got {rollouts_per_example}")
        pairs = (
            [(g, r) for r in range(rollouts_per_example) for g in range(len(rows))]
            if dataset_order
            else [(g, r) for g in range(len(rows)) for r in range(rollouts_per_example)]
        )
        inputs = []
        for g, r in pairs:
            row = rows[g]
            inputs.append(
                RolloutInput(
                    example_id=int(row.get("example_id", g)),
                    prompt=row["prompt"],
                    answer=row.get("answer", "") or "",
                    task=row.get("task") or "default",
                    info=row.get("info") or {},
                    group_id=first_group_id + g,
                    rollout_index=r,
                )
            )
        return inputs

    def _input_rows(self, inputs: Any) -> list[dict[str, Any]]:
        """Formatted rows from a datasets.Dataset, a dict of columns, GenerateInputs or a list of rows."""
        rows = getattr(inputs, "_vf_rows", None)  # our own get_dataset output: already formatted
        if rows is None and isinstance(inputs, _FormattedDataset):
            rows = inputs.rows
        if rows is not None:
            return rows
        if isinstance(inputs, GenerateInputs):
            # the columns that were given (``completion`` is not an input)
            inputs = {k: v for k, v in inputs.model_dump().items() if v is not None and k != "completion"}
        return [self._format_row(r, i) for i, r in enumerate(_to_rows(inputs))]

    async def a_generate(
        self,
        inputs: Any,
        client: Any,
        model: str,
        sampling_args: SamplingArgs | None = None,
        score_rollouts: bool = True,
        max_concurrent: int | None = None,
        max_concurrent_generation: int | None = None,
        max_concurrent_scoring: int | None = None,
        interleave_scoring: bool = True,
        *,
        rollouts_per_example: int = 1,
        rollout_timeout_s: float | None = None,
        on_group: Callable[[list[RolloutResult]], Any] | None = None,
        on_rollout: Callable[[RolloutResult], Any] | None = None,
        **kwargs: Any,
    ) -> GenerateOutputs:
        """Run rollouts for ``inputs`` (rows with prompt or question, answer, task, info).

        ``inputs`` may be a ``datasets.Dataset``, a dict of columns, a `GenerateInputs`
        or a list of row dicts. Rollouts come back in input order, the dataset repeated
        ``rollouts_per_example`` times (a,b,a,b). ``max_concurrent_generation`` bounds
        concurrent rollouts (scoring is interleaved with generation and needs no own
        bound); ``max_concurrent_scoring`` and ``interleave_scoring`` are accepted for
        0.1.x callers.
        """
        rows = self._input_rows(inputs)
        limit = max_concurrent_generation if max_concurrent_generation is not None else max_concurrent
        limit = self.max_concurrent if limit is None else limit
        if type(self).run_rollouts is not LegacyEnvironmentMethods.run_rollouts and not (
            score_rollouts and interleave_scoring
        ):
            # 0.1.5 went through self.run_rollouts on this path, and subclasses override it
            return await self._generate_v01(
                rows * rollouts_per_example, client, model, sampling_args, score_rollouts, limit, **kwargs
            )
        # 0.1.5's non-interleaved path scored the whole batch with rubric.score_rollouts: where that
        # is not ours (a subclass's, or a mock a 0.1.x test put on the rubric) it is called the same way
        batch_scored = score_rollouts and not interleave_scoring and _overrides_score_rollouts(self.rubric)
        results = await run_rollouts(
            self,
            client,
            model,
            self.build_inputs(rows, rollouts_per_example, dataset_order=True),
            sampling_args=sampling_args,
            max_concurrent=limit,
            rollout_timeout_s=self.rollout_timeout_s if rollout_timeout_s is None else rollout_timeout_s,
            score=score_rollouts and not batch_scored,
            on_group=on_group,
            on_rollout=on_rollout,
        )
        out = GenerateOutputs.from_results(results, scored=score_rollouts and not batch_scored)
        if batch_scored:
            scores = await self.rubric.score_rollouts(
                prompts=out.prompt, completions=out.completion, answers=out.answer, states=out.state,
                tasks=out.task, infos=out.info, max_concurrent=limit, apply_weights=True,
            )
            out.reward, out.metrics = list(scores.reward), dict(scores.metrics)
            for i, r in enumerate(results):
                r.reward = out.reward[i] if i < len(out.reward) else 0.0
                r.metrics = {k: v[i] for k, v in out.metrics.items() if i < len(v)}
        return out

    def generate(
        self,
        inputs: Any,
        client: Any,
        model: str,
        sampling_args: SamplingArgs | None = None,
        *args: Any,
        **kwargs: Any,
    ) -> GenerateOutputs:
        """Sync wrapper of `a_generate` for scripts and notebooks (same arguments)."""
        return run_sync(self.a_generate(inputs, client, model, sampling_args, *args, **kwargs))

    async def a_evaluate(
        self,
        client: Any,
        model: str,
        sampling_args: SamplingArgs | None = None,
        num_examples: int = -1,
        rollouts_per_example: int = 1,
        score_rollouts: bool = True,
        max_concurrent: int | None = None,
        **kwargs: Any,
    ) -> GenerateOutputs:
        """Evaluate on the eval split; warns (`RolloutErrorsWarning`) when most rollouts errored.

        Errored rollouts score 0.0, so a wrong model name or a dead server would otherwise
        look like a model that fails every example.
        """
        data = self._eval_rows(num_examples)
        out = await self.a_generate(
            data,
            client,
            model,
            sampling_args=sampling_args,
            score_rollouts=score_rollouts,
            max_concurrent=max_concurrent,
            rollouts_per_example=rollouts_per_example,
            **kwargs,
        )
        warn_about_errors(out.results, stacklevel=1)
        return out

    def _eval_rows(self, n: int = -1) -> _FormattedDataset:
        data = self.eval_dataset if self.eval_dataset is not None else self.dataset
        if data is None:
            raise ConfigError(f"{type(self).__name__} has no dataset")
        return data.subset(n)

    def evaluate(self, client: Any, model: str, *args: Any, **kwargs: Any) -> GenerateOutputs:
        """Evaluate on the eval split (or the training split when there is none); arguments as `a_evaluate`."""
        return run_sync(self.a_evaluate(client, model, *args, **kwargs))


def _overrides_score_rollouts(rubric: Any) -> bool:
    """Whether ``rubric.score_rollouts`` is someone else's: a subclass's or one set on the instance."""
    own = getattr(rubric, "__dict__", {})
    return "score_rollouts" in own or getattr(type(rubric), "score_rollouts", None) is not Rubric.score_rollouts


class _FormattedDataset:
    """Formatted rows plus the user's original object, behaving enough like an HF Dataset.

    Attribute access falls through to an HF ``datasets.Dataset`` built from the
    formatted rows on first use, so ``env.dataset.select(...)`` and friends work,
    while the engine reads the plain rows without any Arrow round trip.
    """

    def __init__(self, rows: list[dict[str, Any]], original: Any) -> None:
        self.rows = rows
        self._original = original
        self._hf: Any = None

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Any:
        return iter(self.rows)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, int):
            return self.rows[key]
        if isinstance(key, str):
            return [r.get(key) for r in self.rows]
        return self.hf[key]

    @property
    def column_names(self) -> list[str]:
        return list(self.rows[0].keys()) if self.rows else []

    @property
    def hf(self) -> Any:
        if self._hf is None:
            self._hf = _rows_dataset(self.rows)
        return self._hf

    def to_list(self) -> list[dict[str, Any]]:
        return list(self.rows)

    def as_hf(self) -> Any:
        """A ``datasets.Dataset`` of these rows that also hands our callers the formatted rows."""
        try:
            return _rows_dataset(self.rows)
        except Exception as exc:  # Arrow cannot store some rows (e.g. mixed content types)
            logger.warning("dataset rows cannot be stored as a datasets.Dataset (%s); returning plain rows", exc)
            return self

    def subset(self, n: int = -1, seed: int | None = None) -> _FormattedDataset:
        rows = self.rows
        if seed is not None:
            import random

            rows = rows[:]
            random.Random(seed).shuffle(rows)
        if n is not None and n >= 0:
            rows = rows[:n]
        return _FormattedDataset(rows, None)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.hf, name)


_ROWS_DATASET_CLASS: Any = None


def _rows_dataset(rows: list[dict[str, Any]]) -> Any:
    """A ``datasets.Dataset`` subclass instance over ``rows`` (``info`` stored as JSON text).

    It is a real HF dataset for users (``select``, ``map``, ``to_pandas``...), and it
    keeps the formatted rows so that passing it back to ``generate``, the eval runner or
    the trainer needs no Arrow round trip (``to_list`` returns them, info as dicts).
    """
    global _ROWS_DATASET_CLASS
    from datasets import Dataset

    if _ROWS_DATASET_CLASS is None:

        class FormattedDataset(Dataset):
            @property
            def rows(self) -> list[dict[str, Any]]:
                kept = self.__dict__.get("_vf_rows")
                return kept if kept is not None else Dataset.to_list(self)

            @property
            def hf(self) -> Any:
                return self

            def to_list(self) -> list[dict[str, Any]]:
                return list(self.rows)

        _ROWS_DATASET_CLASS = FormattedDataset
    arrow_rows = [{**r, "id": r.get("id", r["example_id"]), "info": json.dumps(r["info"])} for r in rows]
    base = Dataset.from_list(arrow_rows)
    out = _ROWS_DATASET_CLASS(base.data, info=base.info, split=base.split, fingerprint=base._fingerprint)
    out.__dict__["_vf_rows"] = rows
    return out
