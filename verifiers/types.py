"""Typed data that crosses module boundaries.

Authoring-facing shapes (messages, state, sampling args) stay plain dicts and
lists, exactly as in the verifiers 0.1.x API, so existing environments keep
working. What the engine produces (`RolloutResult`, `GenerateOutputs`) is a
pydantic model: serialisable to results.jsonl, validated when read back.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, TypedDict

from openai.types.chat.chat_completion import ChatCompletion
from openai.types.chat.chat_completion_message_param import ChatCompletionMessageParam
from openai.types.chat.chat_completion_message_tool_call import ChatCompletionMessageToolCall
from openai.types.chat.chat_completion_role import ChatCompletionRole
from openai.types.chat.chat_completion_tool_param import ChatCompletionToolParam
from openai.types.completion import Completion
from openai.types.shared_params import FunctionDefinition, FunctionParameters
from pydantic import BaseModel, ConfigDict, Field

Message = dict[str, Any]
"""One OpenAI chat message: ``{"role": ..., "content": ..., "tool_calls": ...}``."""
Messages = list[Message] | str
"""A chat transcript, or a raw string in completion mode (``message_type="completion"``)."""
SamplingArgs = dict[str, Any]
"""Request parameters passed to the server (temperature, max_tokens, vLLM extras, ...)."""
State = dict[str, Any]
"""Per-rollout scratch space. Environments may add any keys; the engine owns the documented ones."""
Info = dict[str, Any]
MessageType = Literal["chat", "completion"]

# -- 0.1.x names (verifiers/types.py of v0.1.5), kept so annotations in published environments resolve.
ChatMessage = ChatCompletionMessageParam
"""An OpenAI chat message as the SDK types it (a TypedDict); at run time messages are plain dicts."""
ModelResponse = Completion | ChatCompletion | None
"""What 0.1.x's ``get_model_response`` returned. Not `verifiers.ModelResponse` (this library's parsed
response class, `verifiers.clients.ModelResponse`), which ``import verifiers as vf`` keeps exporting."""
RewardFunc = Callable[..., float | Awaitable[float]]
JsonPrimitive = Literal["string", "number", "integer", "boolean", "array", "object"]

# -- tool calls that read like the openai SDK's objects and serialise like plain JSON ----------
# 0.1.x environments received the SDK's ``ChatCompletionMessageToolCall`` objects in their
# transcripts and wrote ``call.function.name`` / ``call.function.arguments`` / ``call.id``;
# newer code (and ours) indexes dicts: ``call["function"]["name"]``. `ToolCall` is a ``dict``
# (so ``json.dumps``, pydantic dumps and results.jsonl see plain JSON) whose keys can also be
# read as attributes, so both styles work on the same object.


class AttrDict(dict[str, Any]):
    """A dict whose keys are also readable (and writable) as attributes."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no field {name!r}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value

    def model_dump(self, **_: Any) -> dict[str, Any]:
        """Plain nested dicts, like the SDK object's ``model_dump()``."""
        return {k: (v.model_dump() if isinstance(v, AttrDict) else v) for k, v in self.items()}

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump()

    def __deepcopy__(self, memo: dict[int, Any]) -> AttrDict:
        import copy

        return type(self)({k: copy.deepcopy(v, memo) for k, v in self.items()})

    def __reduce__(self) -> Any:
        return (type(self), (dict(self),))


class FunctionCall(AttrDict):
    """``{"name": ..., "arguments": "<json text>"}`` with ``.name`` / ``.arguments``."""

    __slots__ = ()


class ToolCall(AttrDict):
    """``{"id": ..., "type": "function", "function": {...}}`` with ``.id`` / ``.function.name``."""

    __slots__ = ()

    @classmethod
    def from_any(cls, call: Any) -> ToolCall:
        """From an OpenAI-format dict or an openai SDK object."""
        if isinstance(call, ToolCall):
            return call
        if not isinstance(call, Mapping):
            dump = getattr(call, "model_dump", None)
            call = dump() if callable(dump) else {
                "id": getattr(call, "id", None),
                "type": getattr(call, "type", "function"),
                "function": getattr(call, "function", None),
            }
        fn = call.get("function") or {}
        if not isinstance(fn, Mapping):
            fn = {"name": getattr(fn, "name", None), "arguments": getattr(fn, "arguments", None)}
        out = cls({k: v for k, v in call.items() if k != "function"})
        out.setdefault("id", None)
        out.setdefault("type", "function")
        out["function"] = FunctionCall({"name": None, "arguments": None, **fn})
        return out


def as_tool_calls(calls: Any) -> list[ToolCall]:
    """Each call (a dict or an SDK object) as a `ToolCall`."""
    return [ToolCall.from_any(c) for c in calls or []]


StopReason = Literal[
    "completed",  # the environment said the episode is over (or single turn done)
    "max_turns",  # turn budget used up
    "length",  # the model hit max_tokens on its last turn
    "prompt_too_long",  # the prompt no longer fits the context window
    "error",  # an exception ended the rollout (see ``error``)
    "timeout",  # the per-rollout timeout fired
    "cancelled",  # the run was interrupted
]


class TurnTokens(BaseModel):
    """Token-exact record of one model call, as returned by the server.

    ``prompt_ids`` is the full prompt of that call (so it contains earlier turns);
    the trainer uses the prefix relation between turns to rebuild one sequence
    without re-tokenising anything.
    """

    prompt_ids: list[int]
    completion_ids: list[int]
    completion_logprobs: list[float] = Field(default_factory=list)
    finish_reason: str | None = None
    follow_up: bool = False
    """An agent program's call that extended an earlier call of its rollout (that call's messages,
    its reply and new tool/user messages), as the interception gateway saw it."""
    token_in: bool = False
    """A follow-up whose prompt went upstream as the earlier call's exact ids plus the new tail
    (token-in, `verifiers.gateway.token_in`) rather than as messages to render again."""


class TokenSequence(BaseModel):
    """One rollout as a single token sequence: ``prompt_ids + completion_ids``.

    ``completion_mask`` is 1 on tokens the model sampled (trained on) and 0 on
    environment / tool tokens inserted between turns. ``completion_logprobs`` are
    the sampler's logprobs (0 where masked). The attention mask is all ones over
    the sequence and is kept separate from this loss mask.
    """

    prompt_ids: list[int] = Field(default_factory=list)
    completion_ids: list[int] = Field(default_factory=list)
    completion_mask: list[int] = Field(default_factory=list)
    completion_logprobs: list[float] = Field(default_factory=list)
    prefix_consistent: bool = True
    """False when a turn's prompt did not extend the previous turn's tokens; such a rollout
    is not one sequence: `split_token_rows` gives its calls as several rows instead."""


def assemble_tokens(turns: Sequence[TurnTokens]) -> TokenSequence:
    """Join the turns of one rollout; tokens between turns (environment, tools) are masked out."""
    if not turns:
        return TokenSequence()
    first = turns[0]
    out = TokenSequence(prompt_ids=list(first.prompt_ids))
    seen = list(first.prompt_ids)
    for i, turn in enumerate(turns):
        if i > 0:
            if turn.prompt_ids[: len(seen)] != seen:
                out.prefix_consistent = False
                break
            inserted = turn.prompt_ids[len(seen) :]
            out.completion_ids.extend(inserted)
            out.completion_mask.extend([0] * len(inserted))
            out.completion_logprobs.extend([0.0] * len(inserted))
            seen.extend(inserted)
        logprobs = list(turn.completion_logprobs)
        if len(logprobs) != len(turn.completion_ids):
            logprobs = [0.0] * len(turn.completion_ids)
        out.completion_ids.extend(turn.completion_ids)
        out.completion_mask.extend([1] * len(turn.completion_ids))
        out.completion_logprobs.extend(logprobs)
        seen.extend(turn.completion_ids)
    return out


def split_token_rows(turns: Sequence[TurnTokens]) -> list[TokenSequence]:
    """The model calls of one rollout as the fewest token rows that each grow by prefix.

    An agent program's calls need not form one growing history: a summary that replaces the
    transcript (compaction), a chat template that strips earlier turns' reasoning, or a
    sub-agent with its own conversation each start a prompt that does not extend what came
    before. Such calls are not dropped; they start another row. Calls are taken in order; a
    call joins the row whose context (its last call's prompt + completion) is the *longest*
    exact token prefix of the call's prompt: the prompt tokens beyond that context (tool and
    environment text, a sub-agent's answer) are added with mask 0 and logprob 0, then the
    completion with mask 1 and its logprobs. A call that extends no row opens a new one whose
    prompt is its own prompt ids. A call identical to an earlier one (same prompt and
    completion ids: a replayed retry) adds nothing, so every sampled token is trained in
    exactly one row. ``len(rows) - 1`` is the number of prefix breaks (`prefix_breaks`).
    A linear history gives one row equal to `assemble_tokens`'s sequence.
    """
    rows: list[TokenSequence] = []
    contexts: list[list[int]] = []  # each row's prompt + completion ids so far
    seen: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()
    for turn in turns:
        key = (tuple(turn.prompt_ids), tuple(turn.completion_ids))
        if key in seen:
            continue
        seen.add(key)
        prompt = list(turn.prompt_ids)
        best = -1
        for i, ctx in enumerate(contexts):
            if len(ctx) <= len(prompt) and prompt[: len(ctx)] == ctx and (best < 0 or len(ctx) > len(contexts[best])):
                best = i
        if best < 0:
            rows.append(TokenSequence(prompt_ids=prompt))
            contexts.append(list(prompt))
            best = len(rows) - 1
        row, ctx = rows[best], contexts[best]
        inserted = prompt[len(ctx) :]
        row.completion_ids.extend(inserted)
        row.completion_mask.extend([0] * len(inserted))
        row.completion_logprobs.extend([0.0] * len(inserted))
        logprobs = list(turn.completion_logprobs)
        if len(logprobs) != len(turn.completion_ids):
            logprobs = [0.0] * len(turn.completion_ids)
        row.completion_ids.extend(turn.completion_ids)
        row.completion_mask.extend([1] * len(turn.completion_ids))
        row.completion_logprobs.extend(logprobs)
        ctx.extend(inserted)
        ctx.extend(turn.completion_ids)
    return rows


def prefix_breaks(rows: Sequence[TokenSequence]) -> int:
    """Calls that opened a row after the first (`split_token_rows`'s rows minus one, never negative)."""
    return max(len(rows) - 1, 0)


class Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def add(self, other: Usage) -> None:
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens


class RolloutError(BaseModel):
    """An error recorded as data. ``type`` is the exception class name, ``where`` what raised it."""

    type: str
    message: str
    where: str = "rollout"

    @classmethod
    def from_exception(cls, exc: BaseException, where: str = "rollout") -> RolloutError:
        return cls(type=type(exc).__name__, message=str(exc)[:2000], where=where)


class Timing(BaseModel):
    start_time: float = 0.0
    generation_s: float = 0.0
    scoring_s: float = 0.0
    total_s: float = 0.0


class RolloutScore(BaseModel):
    """What a rubric returns for one rollout."""

    reward: float = 0.0
    metrics: dict[str, float] = Field(default_factory=dict)
    errors: list[RolloutError] = Field(default_factory=list)


class RolloutResult(BaseModel):
    """Everything known about one finished rollout. One line of results.jsonl."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    example_id: int
    group_id: int = 0
    rollout_index: int = 0
    task: str = "default"
    prompt: Messages
    completion: Messages
    answer: str = ""
    info: Info = Field(default_factory=dict)
    reward: float = 0.0
    metrics: dict[str, float] = Field(default_factory=dict)
    stop_reason: StopReason = "completed"
    is_truncated: bool = False
    error: RolloutError | None = None
    """The error that ended the rollout, if any. Scoring errors are in ``scoring_errors``."""
    scoring_errors: list[RolloutError] = Field(default_factory=list)
    turns: int = 0
    timing: Timing = Field(default_factory=Timing)
    usage: Usage = Field(default_factory=Usage)
    tokens: list[TurnTokens] = Field(default_factory=list)
    """Per model call token ids and logprobs; empty unless the server returned them."""
    state: State = Field(default_factory=dict, exclude=True)
    """The live state dict; not serialised (it may hold sandboxes, clients, ...)."""

    @property
    def has_error(self) -> bool:
        return self.error is not None

    def token_sequence(self) -> TokenSequence:
        """All model calls as one sequence with a loss mask (`TokenSequence`)."""
        return assemble_tokens(self.tokens)

    def token_rows(self) -> list[TokenSequence]:
        """The model calls as training rows that each grow by prefix (`split_token_rows`): one row
        for a linear history, more when a call's prompt does not extend an earlier call."""
        return split_token_rows(self.tokens)


class GenerateOutputs(BaseModel):
    """Results of ``generate``/``evaluate``: list-valued columns, one entry per rollout (0.1.x shape)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    prompt: list[Messages] = Field(default_factory=list)
    completion: list[Messages] = Field(default_factory=list)
    answer: list[str] = Field(default_factory=list)
    state: list[State] = Field(default_factory=list)
    info: list[Info] = Field(default_factory=list)
    task: list[str] = Field(default_factory=list)
    reward: list[float] = Field(default_factory=list)
    metrics: dict[str, list[float]] = Field(default_factory=dict)
    example_id: list[int] = Field(default_factory=list)
    stop_reason: list[str] = Field(default_factory=list)
    error: list[RolloutError | None] = Field(default_factory=list)
    results: list[RolloutResult] = Field(default_factory=list)

    @classmethod
    def from_results(cls, results: list[RolloutResult], scored: bool = True) -> GenerateOutputs:
        """Columns from per-rollout results; unscored results (``score_rollouts=False``) leave
        ``reward`` and ``metrics`` empty, as 0.1.x did, rather than a column of zeros."""
        names: list[str] = []
        for r in results:
            for k in r.metrics:
                if k not in names:
                    names.append(k)
        return cls(
            prompt=[r.prompt for r in results],
            completion=[r.completion for r in results],
            answer=[r.answer for r in results],
            state=[r.state for r in results],
            info=[r.info for r in results],
            task=[r.task for r in results],
            reward=[r.reward for r in results] if scored else [],
            metrics={k: [r.metrics.get(k, 0.0) for r in results] for k in names} if scored else {},
            example_id=[r.example_id for r in results],
            stop_reason=[r.stop_reason for r in results],
            error=[r.error for r in results],
            results=results,
        )

    def __len__(self) -> int:
        return len(self.results)


# -- 0.1.x models (verifiers/types.py of v0.1.5) ---------------------------------------------


class GenerateInputs(BaseModel):
    """Columns for ``env.generate``: one entry per example (0.1.x shape).

    It reads like an HF ``Dataset`` (``column_names``, ``to_list()``), which is what
    ``generate`` accepts, so ``env.generate(GenerateInputs(...), client, model)`` works.
    """

    prompt: list[Messages]
    answer: list[str] | None = None
    info: list[dict[str, Any]] | None = None
    task: list[str] | None = None
    completion: list[Messages] | None = None

    @property
    def column_names(self) -> list[str]:
        return [name for name in ("prompt", "answer", "info", "task") if getattr(self, name) is not None]

    def to_list(self) -> list[dict[str, Any]]:
        columns = {name: getattr(self, name) for name in self.column_names}
        for name, values in columns.items():
            if len(values) != len(self.prompt):
                raise ValueError(
                    f"GenerateInputs.{name} has {len(values)} entries, prompt has {len(self.prompt)}"
                )
        return [{name: values[i] for name, values in columns.items()} for i in range(len(self.prompt))]


class RolloutScores(BaseModel):
    """Scores of several rollouts (what 0.1.x's ``Rubric.score_rollouts`` returns): one entry per rollout."""

    reward: list[float] = Field(default_factory=list)
    metrics: dict[str, list[float]] = Field(default_factory=dict)


class ProcessedOutputs(BaseModel):
    """Token-level training batch as 0.1.x's ``process_env_results`` produced it."""

    prompt_ids: list[list[int]] = Field(default_factory=list)
    prompt_mask: list[list[int]] = Field(default_factory=list)
    completion_ids: list[list[int]] = Field(default_factory=list)
    completion_mask: list[list[int]] = Field(default_factory=list)
    completion_logprobs: list[list[float]] = Field(default_factory=list)
    rewards: list[float] = Field(default_factory=list)


class Endpoint(TypedDict):
    key: str
    url: str
    model: str


"""One entry of a 0.1.x ``endpoints.py`` registry: key variable, base URL, model."""
Endpoints = dict[str, Endpoint]

__all__ = [
    "AttrDict",
    "ChatCompletion",
    "ChatCompletionMessageParam",
    "ChatCompletionMessageToolCall",
    "ChatCompletionRole",
    "ChatCompletionToolParam",
    "ChatMessage",
    "Completion",
    "Endpoint",
    "Endpoints",
    "FunctionCall",
    "FunctionDefinition",
    "FunctionParameters",
    "GenerateInputs",
    "GenerateOutputs",
    "Info",
    "JsonPrimitive",
    "Message",
    "MessageType",
    "Messages",
    "ModelResponse",
    "ProcessedOutputs",
    "RewardFunc",
    "RolloutError",
    "RolloutResult",
    "RolloutScore",
    "RolloutScores",
    "SamplingArgs",
    "State",
    "StopReason",
    "Timing",
    "TokenSequence",
    "ToolCall",
    "TurnTokens",
    "Usage",
    "as_tool_calls",
    "assemble_tokens",
    "prefix_breaks",
    "split_token_rows",
]
