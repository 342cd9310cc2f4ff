"""`Judge`: an LLM judge a task calls from its ``@vf.reward`` methods.

Tasksets that cannot grade deterministically ask a model: a prompt built from named fields,
one chat call to an OpenAI-compatible endpoint (`JudgeConfig`: ``base_url``, ``model``, the
key in the ``api_key_var`` environment variable), and a verdict parsed from the reply. Subclass
and set ``prompt`` (``{question}``-style placeholders) and override ``parse``. Passing
``trace=`` records the exchange in ``trace.info["judge_calls"]``, even when parsing fails.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any, Generic, cast

from pydantic import BaseModel
from typing_extensions import TypeVar

from verifiers.errors import ConfigError
from verifiers.v1._generic import concrete_type
from verifiers.v1.configs import JudgeConfig
from verifiers.v1.messages import Message, to_dict

if TYPE_CHECKING:
    from verifiers.v1.trace import Trace

ParsedT = TypeVar("ParsedT", default=str)
ConfigT = TypeVar("ConfigT", bound=JudgeConfig, default=JudgeConfig)


class JudgeResponse(BaseModel, Generic[ParsedT]):
    text: str
    parsed: ParsedT | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0


class Judge(Generic[ParsedT, ConfigT]):
    prompt: str | None = None
    """Default prompt template; a config ``prompt`` file replaces it."""

    def __init__(self, config: ConfigT | None = None) -> None:
        config_cls = concrete_type(type(self), JudgeConfig) or JudgeConfig
        self.config: ConfigT = cast(ConfigT, config if config is not None else config_cls())
        if self.config.prompt is not None:
            self.prompt = self.config.prompt.read_text()

    @property
    def reward_name(self) -> str:
        fallback = re.sub(r"(?<!^)(?=[A-Z])", "_", type(self).__name__.removesuffix("Judge")).lower()
        return self.config.name or self.config.id or fallback or "judge"

    def build_messages(self, **fields: Any) -> str | list[Message]:
        """The prompt with ``{field}`` placeholders filled in one pass (other braces are kept)."""
        if self.prompt is None:
            raise ValueError(f"{type(self).__name__} has no `prompt`; set it or override build_messages")
        if not fields:
            return self.prompt
        pattern = re.compile(r"\{(" + "|".join(map(re.escape, fields)) + r")\}")
        return pattern.sub(lambda m: str(fields[m.group(1)]), self.prompt)

    def parse(self, response: JudgeResponse[Any]) -> ParsedT:
        return cast(ParsedT, response.text)

    async def score(self, task: Any, trace: Trace) -> float:
        raise NotImplementedError(f"{type(self).__name__} implements no `score`; call it from a @vf.reward")

    def _client(self) -> Any:
        from openai import AsyncOpenAI

        key = os.environ.get(self.config.api_key_var)
        if not key:
            raise ConfigError(
                f"judge {self.reward_name!r} needs an API key in ${self.config.api_key_var} for "
                f"{self.config.base_url}; set it, or point JudgeConfig.base_url/api_key_var at a "
                "local OpenAI-compatible server"
            )
        return AsyncOpenAI(
            base_url=self.config.base_url,
            api_key=key,
            default_headers=self.config.headers or None,
            timeout=self.config.timeout,
        )

    async def complete(
        self, messages: str | list[Message], *, trace: Trace | None = None, **sampling: Any
    ) -> JudgeResponse[Any]:
        """One chat call; the request/response pair is recorded on `trace` if given."""
        wire = (
            [{"role": "user", "content": messages}]
            if isinstance(messages, str)
            else [to_dict(m) for m in messages]
        )
        request = {"model": self.config.model, "messages": wire, **self.config.sampling, **sampling}
        client = self._client()
        try:
            completion = await client.chat.completions.create(**request)
        finally:
            await client.close()
        usage = completion.usage
        response: JudgeResponse[Any] = JudgeResponse(
            text=completion.choices[0].message.content or "",
            prompt_tokens=getattr(usage, "prompt_tokens", 0) or 0,
            completion_tokens=getattr(usage, "completion_tokens", 0) or 0,
        )
        if trace is not None:
            trace.info.setdefault("judge_calls", []).append(
                {
                    "name": self.reward_name,
                    "request": {"model": request["model"], "messages": wire},
                    "response": response.model_dump(),
                }
            )
        return response

    async def evaluate(self, *, trace: Trace | None = None, **fields: Any) -> JudgeResponse[ParsedT]:
        response = await self.complete(self.build_messages(**fields), trace=trace)
        response.parsed = self.parse(response)
        return response
