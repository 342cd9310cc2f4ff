"""Request models and error bodies of the OpenAI dialect the embedded server speaks.

The fields are OpenAI's plus the vLLM extras trainers rely on (``top_k``, ``min_p``,
``repetition_penalty``, ``min_tokens``, ``ignore_eos``, ``stop_token_ids``,
``return_token_ids``), so a client cannot tell this server from vLLM. Unknown fields are
ignored, as vLLM does; known fields are validated and a bad value is a 400 that names it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from verifiers.inference.engine.sampling import SamplingParams

# The ``error.type`` an OpenAI-compatible server names for an HTTP status (the embedded server's
# and the scripted test server's one table; each picks its own name for a status not listed).
ERROR_TYPES = {
    400: "BadRequestError", 401: "AuthenticationError", 403: "PermissionDeniedError", 404: "NotFoundError",
    405: "MethodNotAllowedError", 408: "RequestTimeoutError", 409: "ConflictError", 413: "RequestTooLargeError",
    422: "UnprocessableEntityError", 429: "RateLimitError", 499: "ClientClosedRequest",
    503: "ServiceUnavailableError",
}


class OpenAIError(Exception):
    """An error the server reports as ``{"error": {...}}`` with an HTTP status."""

    def __init__(self, status: int, message: str, *, type_: str | None = None, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.type = type_ or ERROR_TYPES.get(status, "BadRequestError" if 400 <= status < 500 else "InternalServerError")

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.status}}


def validation_error(exc: ValidationError) -> OpenAIError:
    """Turn pydantic's report into one 400 naming the first offending field."""
    first = exc.errors()[0]
    loc = [str(p) for p in first.get("loc", ())]
    param = loc[0] if loc else None
    where = ".".join(loc) or "request"
    return OpenAIError(400, f"Invalid value for '{where}': {first.get('msg', 'invalid')}", param=param)


class _Common(BaseModel):
    # inf/nan in a sampling parameter would turn a whole batch's probabilities into nan.
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    model: str | None = None
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=-1)
    min_p: float | None = Field(None, ge=0.0, le=1.0)
    repetition_penalty: float | None = Field(None, gt=0.0)
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    max_tokens: int | None = Field(None, ge=1)
    min_tokens: int = Field(0, ge=0)
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    seed: int | None = None
    n: int = Field(1, ge=1, le=128)
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    return_token_ids: bool = False
    # Token-id constraints vLLM accepts; the embedded sampler does not implement them, so a request
    # using them is refused (after its ids are range-checked) rather than silently unconstrained.
    logit_bias: dict[str, float] | None = None
    allowed_token_ids: list[int] | None = None
    bad_words: list[str] | None = None

    def unsupported_constraints(self) -> list[tuple[str, list[Any]]]:
        """``(field, token ids)`` of each non-empty token constraint (ids to range-check first)."""
        out: list[tuple[str, list[Any]]] = []
        if self.logit_bias:
            ids: list[Any] = []
            for k in self.logit_bias:
                try:
                    ids.append(int(k))
                except ValueError:
                    ids.append(k)
            out.append(("logit_bias", ids))
        if self.allowed_token_ids:
            out.append(("allowed_token_ids", list(self.allowed_token_ids)))
        if self.bad_words:
            out.append(("bad_words", []))
        return out

    @field_validator("presence_penalty", "frequency_penalty")
    @classmethod
    def _unsupported_penalty(cls, v: float | None) -> float | None:
        if v not in (None, 0, 0.0):
            raise ValueError("not supported by the embedded server; use repetition_penalty instead")
        return v

    @field_validator("stop")
    @classmethod
    def _stop_strings(cls, v: str | list[str] | None) -> str | list[str] | None:
        items = [v] if isinstance(v, str) else (v or [])
        if any(s == "" for s in items):
            raise ValueError("stop strings must be non-empty")
        if len(items) > 16:
            raise ValueError("at most 16 stop strings")
        return v

    def sampling(self, *, max_tokens: int | None, logprobs: bool, top_logprobs: int) -> SamplingParams:
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return SamplingParams(
            temperature=1.0 if self.temperature is None else self.temperature,
            top_p=1.0 if self.top_p is None else self.top_p,
            top_k=-1 if self.top_k in (None, 0) else self.top_k,
            min_p=self.min_p or 0.0,
            repetition_penalty=self.repetition_penalty or 1.0,
            max_tokens=max_tokens,
            min_tokens=self.min_tokens,
            stop=stop,
            stop_token_ids=list(self.stop_token_ids or []),
            ignore_eos=self.ignore_eos,
            seed=self.seed,
            logprobs=logprobs,
            top_logprobs=top_logprobs,
            include_stop_str_in_output=self.include_stop_str_in_output,
        )

    @property
    def include_usage_in_stream(self) -> bool:
        return bool((self.stream_options or {}).get("include_usage"))


class ToolFunction(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class Tool(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["function"] = "function"
    function: ToolFunction


class ChatRequest(_Common):
    messages: list[dict[str, Any]] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    add_generation_prompt: bool = True
    chat_template_kwargs: dict[str, Any] | None = None

    @field_validator("messages")
    @classmethod
    def _messages(cls, v: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for i, m in enumerate(v):
            if not isinstance(m, dict) or "role" not in m:
                raise ValueError(f"message {i} has no 'role'")
        return v

    def named_tool(self) -> str | None:
        """The function name when ``tool_choice`` names one."""
        tc = self.tool_choice
        if isinstance(tc, dict):
            fn = tc.get("function") or {}
            name = fn.get("name")
            if tc.get("type") != "function" or not isinstance(name, str):
                raise OpenAIError(
                    400, "tool_choice must be 'none', 'auto', 'required' or "
                    '{"type": "function", "function": {"name": ...}}', param="tool_choice"
                )
            if not any(t.function.name == name for t in self.tools or []):
                raise OpenAIError(400, f"tool_choice names {name!r}, which is not in 'tools'", param="tool_choice")
            return name
        return None


class CompletionRequest(_Common):
    prompt: str | list[str] | list[int] | list[list[int]]
    logprobs: int | None = Field(None, ge=0, le=20)
    echo: bool = False
    suffix: str | None = None

    @field_validator("echo")
    @classmethod
    def _no_echo(cls, v: bool) -> bool:
        if v:
            raise ValueError("echo is not supported by the embedded server")
        return v

    @field_validator("suffix")
    @classmethod
    def _no_suffix(cls, v: str | None) -> str | None:
        if v:
            raise ValueError("suffix is not supported by the embedded server")
        return v


class TokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    tools: list[Tool] | None = None
    add_generation_prompt: bool = True
    add_special_tokens: bool = False


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    tokens: list[int]


class ReloadRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str
