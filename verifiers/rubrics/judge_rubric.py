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

import re
from typing import Any

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


_PLACEHOLDERS = re.compile(r"\{(question|answer|response)\}")


def _question(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    users = [m for m in prompt or [] if m.get("role") == "user"]
    return message_text(users[-1]) if users else ""


class JudgeRubric(Rubric):
    def __init__(
        self,
        judge_client: Any = None,
        judge_model: str = "gpt-4.1-nano",
        judge_prompt: str = DEFAULT_JUDGE_PROMPT,
        judge_sampling_args: dict[str, Any] | None = None,
        parser: Parser | None = None,
        funcs: list[RewardFunc] | None = None,
        weights: list[float] | None = None,
        **class_objects: Any,
    ) -> None:
        super().__init__(funcs=funcs, weights=weights, parser=parser, **class_objects)
        self._judge_client_arg = judge_client
        self._judge_client: ChatClient | None = None
        self.judge_model = judge_model
        self.judge_prompt = judge_prompt
        self.judge_sampling_args = dict(judge_sampling_args or {})
        self.class_objects.update(
            judge=self.judge, judge_model=judge_model, judge_prompt=judge_prompt, judge_client=judge_client
        )

    @property
    def judge_client(self) -> ChatClient:
        if self._judge_client is None:
            raw = self._judge_client_arg if self._judge_client_arg is not None else make_client()
            self._judge_client = as_chat_client(raw)
        return self._judge_client

    async def judge(self, prompt: Any, completion: Any, answer: Any, state: dict[str, Any] | None = None, **_: Any) -> str:
        """Ask the judge model; cached per judge prompt in ``state["judge_response"]``."""
        response = self.parser.parse_answer(completion) or ""
        values = {"question": _question(prompt), "answer": str(answer), "response": str(response)}
        # One pass, so a literal "{answer}" inside the question is not filled in (and leaked) again.
        text = _PLACEHOLDERS.sub(lambda m: values[m.group(1)], self.judge_prompt)
        cache: dict[str, str] = state.setdefault("judge_response", {}) if state is not None else {}
        if text in cache:
            return cache[text]
        try:
            res = await self.judge_client.chat(
                self.judge_model, [{"role": "user", "content": text}], sampling_args=self.judge_sampling_args
            )
        except ModelError as exc:
            raise JudgeError(f"judge model {self.judge_model!r} failed: {type(exc).__name__}: {exc}") from exc
        verdict = (res.content or "").strip()
        if not verdict:
            raise JudgeError(f"judge model {self.judge_model!r} returned an empty answer")
        cache[text] = verdict
        return verdict
