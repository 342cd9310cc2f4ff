"""The methods verifiers 0.1.x environments had, which their authors call and override.

`Environment` inherits them. They sit in a mixin of their own, rather than in
`verifiers.compat`, because they must be methods of every environment (an author calls
``self.get_model_response(...)`` inside ``rollout`` and overrides
``process_chat_format_vllm``), and `verifiers.compat` is the layer *above* the core that
the core never imports. Each method follows verifiers 0.1.5's signature and behaviour
(``process_chat_format``, ``process_completion_format`` and the non-vLLM
``process_env_results``: 0.1.2's, the last version that had them) and is built on the
core: nothing in the rollout engine depends on this module, except that the turn loop
calls an overridden `get_model_response` the way 0.1.5's loop called it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from verifiers.clients.create_client import CreateMethodChatClient, v01_request_args
from verifiers.clients.errors import map_openai_error
from verifiers.clients.openai_client import as_chat_client, get_model_response
from verifiers.clients.response import ModelResponse, ResponseView, overlong_prompt_response
from verifiers.errors import ConfigError, EnvError, OverlongPromptError
from verifiers.rollout import retokenize
from verifiers.rollout.tokens import process_results_from_tokens
from verifiers.types import (
    GenerateOutputs,
    Info,
    Messages,
    MessageType,
    ProcessedOutputs,
    SamplingArgs,
    State,
)


def _choice(response: Any) -> Any:
    choices = getattr(response, "choices", None)
    if not isinstance(choices, Sequence) or len(choices) != 1:
        raise EnvError("a response should always have exactly one choice")
    return choices[0]


def _logprobs_field(response: Any, field: str, endpoint: str) -> Any:
    logprobs = getattr(_choice(response), "logprobs", None)
    value = getattr(logprobs, field, None) if logprobs is not None else None
    if value is None:
        raise EnvError(
            f"the response has no logprobs.{field}: request logprobs (sampling_args={{'logprobs': True}}) "
            f"from {endpoint}"
        )
    return value


def _own_tokens(response: Any) -> Any:
    """The token record our clients keep on a response (`ResponseView` / `ModelResponse`), if any.

    Only our own response types are asked: any other object (an SDK object, a ``Mock`` a 0.1.x
    test put in ``state["responses"]``, which answers every attribute) is read as 0.1.5 read it.
    """
    inner = response.response if isinstance(response, ResponseView) else response
    return inner.tokens if isinstance(inner, ModelResponse) else None


class LegacyEnvironmentMethods:
    """0.1.x methods of `Environment` (see the module docstring)."""

    message_type: MessageType
    oai_tools: list[dict[str, Any]] | None

    # -- model calls ----------------------------------------------------------------------------
    async def get_model_response(
        self,
        client: Any,
        model: str,
        prompt: Messages,
        oai_tools: list[dict[str, Any]] | None = None,
        sampling_args: SamplingArgs | None = None,
        message_type: MessageType | None = None,
        **kwargs: Any,
    ) -> Any:
        """One model call, as 0.1.5 made it.

        ``client`` is whatever a rollout gets. An ``AsyncOpenAI`` / ``OpenAI`` client or a
        `ChatClient` gives the openai SDK's ``ChatCompletion`` / ``Completion``. Any other
        object with ``chat.completions.create`` (a wrapper, a mock, a client whose ``create``
        was patched) has that ``create`` called with 0.1.5's arguments and its return value
        handed back unread, whatever it is, and its exceptions re-raised, as 0.1.5 did. A
        prompt over the server's context length gives 0.1.5's placeholder response
        (``id == "overlong-prompt"``, ``finish_reason == "length"``) instead of an error.
        Completion mode refuses tools. Only ``self.message_type`` is read (0.1.x tests call
        this on a stand-in ``self``). The turn loop of `MultiTurnEnv` calls this method only
        when a subclass overrides it (then with 0.1.5's keyword arguments); otherwise it
        takes a faster path with an equivalent request (``max_tokens`` left as it is: servers
        accept both names).
        """
        message_type = message_type or self.message_type
        if message_type == "completion":
            if oai_tools:
                raise ConfigError("oai_tools are not supported for completion tasks.")
            if not isinstance(prompt, str):
                raise ConfigError("a completion-mode call needs a string prompt, got chat messages")
        elif isinstance(prompt, str):
            raise ConfigError("a chat-mode call needs a list of messages, got a string prompt")
        chat_client = as_chat_client(client)
        if isinstance(chat_client, CreateMethodChatClient):  # the caller's own create: its result as is
            try:
                return await chat_client.create(model, prompt, tools=oai_tools or None, sampling_args=sampling_args)
            except Exception as exc:
                if isinstance(map_openai_error(exc), OverlongPromptError):
                    return overlong_prompt_response(message_type)
                raise
        args = v01_request_args(prompt, sampling_args, message_type)
        try:
            response = await get_model_response(chat_client, model, prompt, tools=oai_tools or None, sampling_args=args)
        except OverlongPromptError:
            return overlong_prompt_response(message_type)
        return ResponseView(response).sdk

    async def run_rollout_with_semaphore(
        self,
        semaphore: asyncio.Semaphore,
        client: Any,
        model: str,
        prompt: Messages,
        answer: str = "",
        task: str = "default",
        info: Info | None = None,
        sampling_args: SamplingArgs | None = None,
        **kwargs: Any,
    ) -> tuple[Messages, State]:
        async with semaphore:
            return await self._rollout_and_cleanup(client, model, prompt, answer, task, info, sampling_args, **kwargs)

    async def run_rollouts(
        self,
        client: Any,
        model: str,
        prompts: list[Messages],
        answers: list[str],
        tasks: list[str],
        infos: list[Info],
        sampling_args: SamplingArgs | None = None,
        max_concurrent: int = -1,
        **kwargs: Any,
    ) -> list[tuple[Messages, State]]:
        """``(completion, state)`` per prompt, in order, at most ``max_concurrent`` at once (0.1.5).

        As in 0.1.5 a failing rollout raises here; `Environment.a_generate` is the path
        that records failures and keeps going.
        """
        semaphore = asyncio.Semaphore(max_concurrent) if max_concurrent > 0 else None

        async def one(prompt: Messages, answer: str, task: str, info: Info) -> tuple[Messages, State]:
            if semaphore is None:
                return await self._rollout_and_cleanup(client, model, prompt, answer, task, info, sampling_args, **kwargs)
            return await self.run_rollout_with_semaphore(
                semaphore, client, model, prompt, answer, task, info, sampling_args, **kwargs
            )

        return list(await asyncio.gather(*(one(*row) for row in zip(prompts, answers, tasks, infos, strict=True))))

    async def _rollout_and_cleanup(self, client: Any, model: str, *args: Any, **kwargs: Any) -> tuple[Messages, State]:
        state: State = {}
        try:
            completion, returned = await self.rollout(client, model, *args, state=state, **kwargs)  # type: ignore[attr-defined]
            return completion, returned
        finally:
            await self.cleanup_state(state)  # type: ignore[attr-defined]

    async def _generate_v01(
        self, rows: list[dict[str, Any]], client: Any, model: str, sampling_args: SamplingArgs | None,
        score_rollouts: bool, max_concurrent: int, **kwargs: Any,
    ) -> GenerateOutputs:
        """0.1.5's non-interleaved ``a_generate``: ``self.run_rollouts``, then the rubric over all of them."""
        prompts = [r["prompt"] for r in rows]
        answers = [r.get("answer", "") for r in rows]
        tasks = [r.get("task") or "default" for r in rows]
        infos = [r.get("info") or {} for r in rows]
        rollouts = await self.run_rollouts(
            client, model, prompts, answers, tasks, infos,
            sampling_args=self.merge_sampling_args(sampling_args), max_concurrent=max_concurrent, **kwargs,  # type: ignore[attr-defined]
        )
        out = GenerateOutputs(
            prompt=prompts, answer=answers, task=tasks, info=infos,
            completion=[c for c, _ in rollouts], state=[s for _, s in rollouts],
        )
        if score_rollouts:
            scores = await self.rubric.score_rollouts(  # type: ignore[attr-defined]
                prompts=out.prompt, completions=out.completion, answers=answers, states=out.state,
                tasks=tasks, infos=infos, max_concurrent=max_concurrent, apply_weights=True,
            )
            out.reward, out.metrics = list(scores.reward), dict(scores.metrics)
        return out

    # -- parsing responses (0.1.5) ----------------------------------------------------------------
    def parse_chat_completion_logprobs(self, chat_completion: Any) -> list[float]:
        """The sampled tokens' logprobs of a chat response (``logprobs.content[*].logprob``)."""
        own = _own_tokens(chat_completion)
        if own is not None and own.completion_logprobs:
            return list(own.completion_logprobs)
        return [float(t.logprob) for t in _logprobs_field(chat_completion, "content", "/v1/chat/completions")]

    def parse_completion_logprobs(self, completion: Any) -> list[float]:
        own = _own_tokens(completion)
        if own is not None and own.completion_logprobs:
            return list(own.completion_logprobs)
        return list(_logprobs_field(completion, "token_logprobs", "/v1/completions"))

    def parse_chat_completion_tokens(self, chat_completion: Any) -> list[int]:
        """The sampled token ids: the server's ``token_ids`` when it returned them, else
        0.1.5's reading of ``logprobs.content[*].token`` as ``"token_id:<int>"`` (vLLM's
        ``return_tokens_as_token_ids``)."""
        own = _own_tokens(chat_completion)
        if own is not None:
            return list(own.completion_ids)
        content = _logprobs_field(chat_completion, "content", "/v1/chat/completions")
        return [int(str(t.token).split(":")[-1]) for t in content]

    def parse_completion_tokens(self, completion: Any) -> list[int]:
        own = _own_tokens(completion)
        if own is not None:
            return list(own.completion_ids)
        return [int(str(t).split(":")[-1]) for t in _logprobs_field(completion, "tokens", "/v1/completions")]

    # -- training rows (0.1.x) ----------------------------------------------------------------------
    def process_chat_format(
        self, prompt: list[Any], completion: list[Any], processing_class: Any, mask_env_responses: bool = False
    ) -> tuple[list[int], list[int], list[int], list[int]]:
        """0.1.2: prompt and completion ids by re-applying the chat template prefix by prefix."""
        return retokenize.chat_format(prompt, completion, processing_class, mask_env_responses)

    def process_completion_format(
        self, prompt: str, completion: str, processing_class: Any
    ) -> tuple[list[int], list[int], list[int], list[int]]:
        """0.1.2: prompt and completion encoded separately."""
        return retokenize.completion_format(prompt, completion, processing_class)

    def process_chat_format_vllm(
        self, prompt: list[Any], completion: list[Any], state: State, processing_class: Any,
        mask_env_responses: bool = False,
    ) -> retokenize.Row:
        """0.1.5: the model's turns from its responses' token ids, the environment's from the template."""
        return retokenize.chat_format_from_responses(
            prompt, completion, state, processing_class, mask_env_responses,
            self.parse_chat_completion_tokens, self.parse_chat_completion_logprobs,
        )

    def process_completion_format_vllm(
        self, prompt: str, completion: str, state: State, processing_class: Any, mask_env_responses: bool = False
    ) -> retokenize.Row:
        return retokenize.completion_format_from_responses(
            prompt, completion, state, processing_class, mask_env_responses,
            self.parse_completion_tokens, self.parse_completion_logprobs,
        )

    def process_env_results_vllm(
        self,
        prompts: list[Messages],
        completions: list[Messages],
        states: list[State],
        rewards: list[float],
        processing_class: Any = None,
        max_seq_len: int = -1,
        mask_env_responses: bool = False,
        mask_truncated_completions: bool = False,
        zero_truncated_completions: bool = False,
    ) -> ProcessedOutputs:
        """Token ids, masks and logprobs per rollout, from the token ids the server returned.

        Rollouts of our own loop carry, per model call, the prompt ids the server saw and
        the ids it sampled (``state["tokens"]``): used as they are, which is exact where
        re-applying a chat template is not. Otherwise (states built by other code) 0.1.5's
        path: ``process_chat_format_vllm`` / ``process_completion_format_vllm`` with
        ``processing_class``. Request token ids with
        ``sampling_args={"logprobs": True, "extra_body": {"return_token_ids": True}}``.
        """
        self._check_lengths(prompts, completions, states, rewards)
        if all(state.get("tokens") for state in states):
            return process_results_from_tokens(
                states, rewards, max_seq_len=max_seq_len, mask_env_responses=mask_env_responses,
                mask_truncated_completions=mask_truncated_completions,
                zero_truncated_completions=zero_truncated_completions,
            )
        if processing_class is None:
            raise EnvError(
                "process_env_results_vllm: these rollouts carry no token ids (state['tokens']); pass the "
                "tokenizer as processing_class, or request ids with sampling_args={'logprobs': True, "
                "'extra_body': {'return_token_ids': True}}"
            )
        rows = [
            self.process_chat_format_vllm(p, c, s, processing_class, mask_env_responses)  # type: ignore[arg-type]
            if self.message_type == "chat"
            else self.process_completion_format_vllm(p, c, s, processing_class, mask_env_responses)  # type: ignore[arg-type]
            for p, c, s in zip(prompts, completions, states, strict=True)
        ]
        return _processed(rows, rewards, max_seq_len, mask_truncated_completions, zero_truncated_completions)

    def process_env_results(
        self,
        prompts: list[Messages],
        completions: list[Messages],
        states: list[State],
        rewards: list[float],
        processing_class: Any = None,
        max_seq_len: int = -1,
        mask_env_responses: bool = False,
        mask_truncated_completions: bool = False,
        zero_truncated_completions: bool = False,
    ) -> ProcessedOutputs:
        """0.1.x ``process_env_results`` for any server.

        Rollouts with the server's token ids are processed exactly as
        `process_env_results_vllm` does (0.1.5 made this name an alias of it). Rollouts
        without them (a hosted API, a mock) are re-tokenised with ``processing_class`` as
        0.1.2 did (``process_chat_format`` / ``process_completion_format``; logprobs 0).
        """
        self._check_lengths(prompts, completions, states, rewards)
        if all(state.get("tokens") for state in states) or processing_class is None:
            return self.process_env_results_vllm(
                prompts, completions, states, rewards, processing_class, max_seq_len, mask_env_responses,
                mask_truncated_completions, zero_truncated_completions,
            )
        rows: list[retokenize.Row] = []
        for prompt, completion in zip(prompts, completions, strict=True):
            if isinstance(prompt, list):
                ids = self.process_chat_format(prompt, completion, processing_class, mask_env_responses)  # type: ignore[arg-type]
            else:
                ids = self.process_completion_format(prompt, completion, processing_class)  # type: ignore[arg-type]
            rows.append((*ids, [0.0] * len(ids[2])))
        return _processed(rows, rewards, max_seq_len, mask_truncated_completions, zero_truncated_completions)

    @staticmethod
    def _check_lengths(*columns: Sequence[Any]) -> None:
        if len({len(c) for c in columns}) > 1:
            raise ConfigError("process_env_results: prompts, completions, states and rewards differ in length")

    # -- datasets -----------------------------------------------------------------------------------
    def make_dataset(
        self,
        results: GenerateOutputs,
        rollouts_per_example: int = 1,
        push_to_hf_hub: bool = False,
        hub_name: str | None = None,
        state_columns: list[str] | None = None,
        push_to_hub: bool | None = None,
        **kwargs: Any,
    ) -> Any:
        """Results as a ``datasets.Dataset`` (0.1.x columns: prompt, completion, answer, task,
        reward, average_reward, info, one column per metric, chosen state columns)."""
        push = push_to_hf_hub if push_to_hub is None else push_to_hub
        if push and hub_name is None:
            raise ConfigError("make_dataset: hub_name is required to push to the Hugging Face Hub")
        from verifiers.data.results import results_to_dataset  # here: `import verifiers` skips verifiers.data

        dataset = results_to_dataset(results, rollouts_per_example, state_columns)
        if push:
            dataset.push_to_hub(hub_name)
        return dataset


def _processed(
    rows: list[retokenize.Row], rewards: Sequence[float], max_seq_len: int, mask_truncated: bool, zero_truncated: bool
) -> ProcessedOutputs:
    out = ProcessedOutputs()
    for row, reward in zip(rows, rewards, strict=True):
        (prompt_ids, prompt_mask, ids, mask, logprobs), truncated = retokenize.truncate_row(row, max_seq_len, mask_truncated)
        out.prompt_ids.append(prompt_ids)
        out.prompt_mask.append(prompt_mask)
        out.completion_ids.append(ids)
        out.completion_mask.append(mask)
        out.completion_logprobs.append(logprobs)
        out.rewards.append(0.0 if truncated and zero_truncated else float(reward))
    return out
