"""JudgeRubric: reward functions that ask another model for a verdict.

Reward functions receive a ``judge`` coroutine and decide how to turn its text
into a score, e.g.::

    async def correct(judge, prompt, completion, answer, state):
        verdict = await judge(prompt, completion, answer, state)
        return 1.0 if "yes" in verdict.lower() else 0.0

When the judge fails (server error, empty answer) ``judge`` raises
`JudgeError`; the rubric records it on the rollout and the function scores 0.
The error is visible in results and summaries, never a silent zero.
"""

from __future__ import annotations

from typing import Any

import openai

from verifiers._helpers import maybe_await
from verifiers.clients.openai_client import ChatClient, as_chat_client, make_client
from verifiers.errors import JudgeError, ModelError
from verifiers.parsers.parser import Parser, message_text
from verifiers.rubrics.rubric import RewardFunc, Rubric

DEFAULT_JUDGE_PROMPT = """Given a ground truth answer and a response, determine if the response is correct.

Question:
```
{question}
```

Ground truth answer:
```
{answer}
```

Response:
```
{response}
```

Respond either "yes" or "no" only."""


def _question(prompt: Any) -> str:
    """The last prompt message's text (0.1.x took the last message, whatever its role)."""
    if isinstance(prompt, str):
        return prompt
    if prompt and isinstance(prompt[-1], dict) and "content" in prompt[-1]:
        return message_text(prompt[-1])
    return ""


def judge_request_args(sampling_args: dict[str, Any] | None) -> dict[str, Any]:
    """Judge sampling args as 0.1.x sent them: ``max_tokens`` renamed to ``max_completion_tokens``
    (the chat API's name, which reasoning models require), ``None`` values dropped."""
    args = dict(sampling_args or {})
    if "max_tokens" in args:
        value = args.pop("max_tokens")
        if value is not None:
            args["max_completion_tokens"] = value
    return {k: v for k, v in args.items() if v is not None}


class JudgeRubric(Rubric):
    """A rubric whose reward functions may ask a judge model.

    ``judge_client`` is exactly the client given (``AsyncOpenAI``, ``OpenAI``, or
    anything with ``chat.completions.create``), because 0.1.x reward functions call
    ``rubric.judge_client.chat.completions.create(...)`` themselves. Without one, a
    client for ``OPENAI_BASE_URL``/``OPENAI_API_KEY`` is made, as 0.1.x did.
    """

    def __init__(
        self,
        judge_client: Any = None,
        judge_model: str = "gpt-4.1-nano",
        judge_prompt: str = DEFAULT_JUDGE_PROMPT,
        judge_sampling_args: dict[str, Any] | None = None,
        parser: Parser | None = None,
        funcs: list[RewardFunc] | None = None,
        weights: list[float] | None = None,
        parallelize_scoring: bool = False,
        **class_objects: Any,
    ) -> None:
        # As in 0.1.x the client exists from construction on (reward functions may ask for it).
        self._judge_client = judge_client if judge_client is not None else make_client()
        self.judge_model = judge_model
        self.judge_prompt = judge_prompt
        self.judge_sampling_args = dict(judge_sampling_args or {})
        super().__init__(
            funcs=funcs, weights=weights, parser=parser, parallelize_scoring=parallelize_scoring, **class_objects
        )
        self.class_objects.update(
            judge=self.judge,
            judge_model=judge_model,
            judge_prompt=judge_prompt,
            judge_sampling_args=self.judge_sampling_args,
            judge_client=self._judge_client,
        )

    @property
    def judge_client(self) -> Any:
        return self._judge_client

    @judge_client.setter
    def judge_client(self, client: Any) -> None:
        self._judge_client = client
        self.class_objects["judge_client"] = client

    async def _ask(self, text: str) -> str:
        client = self.judge_client
        messages = [{"role": "user", "content": text}]
        args = judge_request_args(self.judge_sampling_args)
        if isinstance(client, (openai.AsyncOpenAI, openai.OpenAI, ChatClient)):
            try:
                res = await as_chat_client(client).chat(self.judge_model, messages, sampling_args=args)
            except ModelError as exc:
                raise JudgeError(f"judge model {self.judge_model!r} failed: {type(exc).__name__}: {exc}") from exc
            return res.content or ""
        # Any other object shaped like the SDK (a wrapper, a mock server client).
        try:
            res = await maybe_await(client.chat.completions.create(model=self.judge_model, messages=messages, **args))
            return res.choices[0].message.content or ""
        except Exception as exc:
            raise JudgeError(f"judge model {self.judge_model!r} failed: {type(exc).__name__}: {exc}") from exc

    async def judge(self, prompt: Any, completion: Any, answer: Any, state: dict[str, Any] | None = None, **_: Any) -> str:
        """Ask the judge model; cached per judge prompt in ``state["judge_response"]``.

        The prompt is filled with ``str.format`` (so ``{{``/``}}`` are literal braces, as
        in 0.1.x); the response is the parser's ``parse_answer`` of the completion.
        """
        response = self.parser.parse_answer(completion)
        text = self.judge_prompt.format(question=_question(prompt), answer=answer, response=response)
        cache: dict[str, str] = state.setdefault("judge_response", {}) if state is not None else {}
        if text in cache:
            return cache[text]
        verdict = (await self._ask(text)).strip()
        if not verdict:
            raise JudgeError(f"judge model {self.judge_model!r} returned an empty answer")
        cache[text] = verdict
        return verdict
