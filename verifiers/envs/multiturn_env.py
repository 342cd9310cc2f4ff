"""MultiTurnEnv: the turn loop "model → is_completed? → env_response → is_completed?", up to ``max_turns``.

Hooks may be sync or async. ``env_response`` may return ``(messages, state)``
(2025 style), a list of messages (later style), one message dict, or a string
in completion mode. ``is_completed`` is checked before every model turn (so a
game can end on its own final feedback, which the rubric then sees in the
completion) and right after it; once the model's turn ends the episode (by
``is_completed`` or ``max_turns``) the environment does not answer it.
"""

from __future__ import annotations

import contextvars
import copy
import time
from abc import abstractmethod
from typing import Any

from verifiers._helpers import maybe_await
from verifiers.clients.create_client import as_model_response
from verifiers.clients.openai_client import ChatClient, as_chat_client, get_model_response
from verifiers.clients.response import OVERLONG_PROMPT_ID, ModelResponse, ResponseView
from verifiers.envs.environment import Environment
from verifiers.envs.legacy import LegacyEnvironmentMethods
from verifiers.errors import ConfigError, EnvError, OverlongPromptError
from verifiers.types import Info, Message, Messages, SamplingArgs, State, Usage, as_tool_calls

# Set when the turn limit was found reached during the current task's `is_completed` call, so the
# stop reason says "max_turns" exactly when the limit (not the environment's own rule) ended it.
# A context variable: every rollout runs in its own asyncio task.
_LIMIT_HIT: contextvars.ContextVar[bool] = contextvars.ContextVar("vf_turn_limit_hit", default=False)


def _normalise_env_response(value: Any, state: State, completion_mode: bool) -> tuple[list[Message] | str, State]:
    if isinstance(value, tuple):
        if len(value) != 2:
            raise EnvError(f"env_response returned a tuple of {len(value)} items; return (messages, state) or messages")
        value, new_state = value
        if isinstance(new_state, dict) and new_state is not state:
            state.update(new_state)
    if completion_mode:
        if not isinstance(value, str):
            raise EnvError(f"env_response must return a string in completion mode, got {type(value).__name__}")
        return value, state
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(m, dict) for m in value):
        raise EnvError(f"env_response must return a list of message dicts, got {type(value).__name__}")
    return value, state


class MultiTurnEnv(Environment):
    """Alternate model turns and environment responses until the episode ends.

    ``max_turns`` counts model calls; ``-1`` (the default, as in 0.1.x) or ``0`` means
    no limit. The episode ends, without a further environment response, as soon as
    `is_completed` says so or the model has used its last allowed turn.
    """

    def __init__(self, max_turns: int = -1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.max_turns = max_turns

    # -- hooks ------------------------------------------------------------------------------
    async def setup_state(self, state: State, **kwargs: Any) -> State:
        """Prepare per-rollout state (e.g. create a game or a sandbox). Return the state."""
        return state

    async def max_turns_reached(self, state: State) -> bool:
        """Has the model used all ``max_turns`` turns? (Always False without a limit.)"""
        reached = self.max_turns > 0 and state["turn"] >= self.max_turns
        if reached:
            _LIMIT_HIT.set(True)
        return reached

    async def prompt_too_long(self, state: State) -> bool:
        return bool(state.get("prompt_too_long", False))

    async def is_completed(self, messages: Messages, state: State, **kwargs: Any) -> bool:
        """Is the episode over? Checked before every model turn and right after it.

        The default ends at the turn limit or an overlong prompt; overrides may call
        ``self.max_turns_reached(state)``. The limit is enforced either way (0.1.x enforced it
        only through this method, so an override that forgot it ran until the context filled).
        """
        return bool(await maybe_await(self.max_turns_reached(state))) or bool(
            await maybe_await(self.prompt_too_long(state))
        )

    @abstractmethod
    async def env_response(self, messages: Messages, state: State, **kwargs: Any) -> Any:
        """The environment's reply to the model's last message."""

    # -- loop -------------------------------------------------------------------------------
    def init_state(
        self, prompt: Messages, answer: str, task: str, info: Info | None, state: State | None = None
    ) -> State:
        state = state if state is not None else {}
        state.update(
            id=state.get("example_id", 0),
            prompt=prompt,
            completion=[] if isinstance(prompt, list) else "",
            answer=answer,
            task=task,
            info=info if info is not None else {},
            turn=0,
            responses=[],
            tokens=[],
            usage=Usage(),
            stop_reason=None,
            is_truncated=False,
            timing={"generation_ms": 0.0, "scoring_ms": 0.0, "total_ms": 0.0},
        )
        if isinstance(prompt, str):
            state["responses_start_idx"] = []
        return state

    async def _model_turn(
        self, client: Any, chat_client: ChatClient, model: str, messages: Messages, args: SamplingArgs,
        state: State, **kwargs: Any,
    ) -> ModelResponse:
        """One model call. A subclass's own ``get_model_response`` is called as 0.1.5's loop called it
        (the client as given, 0.1.5's keyword arguments) and may return anything response-shaped."""
        completion_mode = isinstance(messages, str)
        tools = None if completion_mode else (state["info"] or {}).get("oai_tools") or self.oai_tools
        if type(self).get_model_response is LegacyEnvironmentMethods.get_model_response:
            return await get_model_response(chat_client, model, messages, tools=tools, sampling_args=args)
        returned = await self.get_model_response(
            client, model, messages, oai_tools=tools, sampling_args=args, message_type=self.message_type,
            initial_prompt=len(state["responses"]) == 0, **kwargs,
        )
        if getattr(returned, "id", None) == OVERLONG_PROMPT_ID:
            raise OverlongPromptError("get_model_response returned the overlong-prompt placeholder")
        return as_model_response(returned, completion_mode)

    async def _completed(self, messages: Any, state: State, **kwargs: Any) -> str | None:
        """``is_completed``, with why: "max_turns" when it ended on the turn limit (the default, or
        an override calling ``max_turns_reached``), "completed" when the environment's own rule did
        (even on its last allowed turn), None when the episode goes on."""
        token = _LIMIT_HIT.set(False)
        try:
            done = await maybe_await(self.is_completed(messages, state, **kwargs))
            return ("max_turns" if _LIMIT_HIT.get() else "completed") if done else None
        finally:
            _LIMIT_HIT.reset(token)

    async def rollout(
        self,
        client: Any,
        model: str,
        prompt: Messages,
        answer: str = "",
        task: str = "default",
        info: Info | None = None,
        sampling_args: SamplingArgs | None = None,
        state: State | None = None,
        **kwargs: Any,
    ) -> tuple[Messages, State]:
        chat_client = as_chat_client(client)
        args = self.merge_sampling_args(sampling_args)
        completion_mode = isinstance(prompt, str)
        if completion_mode != (self.message_type == "completion"):
            # a dataset row of the wrong kind (the environment was built with a warning); 0.1.x asserted here
            kind, wanted, other = ("text", "chat messages", "completion") if completion_mode else (
                "chat messages", "text", "chat"
            )
            raise ConfigError(
                f"{type(self).__name__} has message_type={self.message_type!r} but this prompt is {kind}; "
                f"give {wanted} prompts or use message_type={other!r}"
            )
        state = self.init_state(prompt, answer, task, info, state)
        started = time.perf_counter()
        new_state = await maybe_await(self.setup_state(state, **kwargs))
        if isinstance(new_state, dict) and new_state is not state:
            state.update(new_state)
        messages: Any = prompt if completion_mode else copy.deepcopy(prompt)
        completion: Any = "" if completion_mode else state["completion"]

        def record(stop: str) -> tuple[Messages, State]:
            state["stop_reason"] = stop
            state["completion"] = completion
            elapsed_ms = (time.perf_counter() - started) * 1000
            state["timing"]["generation_ms"] = elapsed_ms
            state["timing"]["total_ms"] = elapsed_ms
            return completion, state

        while True:
            # Checked before each model turn: setup_state or the last env response may end it.
            if (reason := await self._completed(messages, state, **kwargs)) is not None:
                return record(reason)
            if await maybe_await(self.max_turns_reached(state)):
                return record("max_turns")
            try:
                response = await self._model_turn(client, chat_client, model, messages, args, state, **kwargs)
            except OverlongPromptError:
                state["is_truncated"] = True
                state["prompt_too_long"] = True
                return record("prompt_too_long")
            state["turn"] += 1
            state["responses"].append(ResponseView(response))
            state["usage"].add(response.usage)
            if response.tokens is not None:
                state["tokens"].append(response.tokens)
            if completion_mode:
                state["responses_start_idx"].append(len(completion))
                messages += response.content or ""
                completion += response.content or ""
            else:
                msg = response.to_message()
                if msg.get("content") is None:
                    msg["content"] = ""  # 0.1.x: a tool-calls-only reply has empty-string content
                if msg.get("tool_calls"):
                    msg["tool_calls"] = as_tool_calls(msg["tool_calls"])
                messages.append(msg)
                completion.append(msg)
            state["completion"] = completion
            if response.is_truncated:
                state["is_truncated"] = True
                return record("length")
            # The episode ends on the model's turn when is_completed says so or the turn
            # budget is spent; the environment does not answer that turn (as in 0.1.x).
            if (reason := await self._completed(messages, state, **kwargs)) is not None:
                return record(reason)
            if await maybe_await(self.max_turns_reached(state)):
                return record("max_turns")
            env_msgs, state = _normalise_env_response(
                await maybe_await(self.env_response(messages, state, **kwargs)), state, completion_mode
            )
            if completion_mode:
                messages += env_msgs
                completion += env_msgs
            else:
                messages.extend(env_msgs)
                completion.extend(env_msgs)
            state["completion"] = completion
