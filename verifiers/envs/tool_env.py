"""ToolEnv: the model calls Python functions until it answers without a tool call.

Each function becomes an OpenAI tool schema from its signature, type hints and
Google-style docstring. Results are sent as ``str(result)`` (as in 0.1.x). Every
failure of a call (malformed JSON arguments, an unknown tool, wrong arguments,
an exception inside the tool, a timeout) is sent back to the model as that
call's tool message, formatted by ``error_formatter``, and counted in
``state["tool_errors"]``; it never ends the rollout. The episode ends when the
model answers without a tool call or has used ``max_turns`` turns; tools are not
run after the last allowed turn.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from verifiers._helpers import callable_name, maybe_await
from verifiers.envs.multiturn_env import MultiTurnEnv
from verifiers.errors import EnvError, ToolError, ToolExecutionError
from verifiers.tools.execution import (
    call_tool,
    default_error_formatter,
    parse_arguments,
    parse_tool_call,
)
from verifiers.tools.schema import tool_schema
from verifiers.types import Message, Messages, RolloutError, State


class ToolEnv(MultiTurnEnv):
    def __init__(
        self,
        tools: Sequence[Callable[..., Any]] | None = None,
        max_turns: int = 10,
        error_formatter: Callable[[Exception], str] = default_error_formatter,
        tool_timeout_s: float | None = 30.0,
        **kwargs: Any,
    ) -> None:
        self.tools: list[Callable[..., Any]] = []
        self.tool_map: dict[str, Callable[..., Any]] = {}
        self.skipped_args: dict[str, list[str]] = {}
        self.error_formatter = error_formatter
        self.tool_timeout_s = tool_timeout_s
        super().__init__(max_turns=max_turns, **kwargs)
        self.oai_tools = []
        for tool in tools or []:
            self.add_tool(tool)

    def add_tool(self, tool: Callable[..., Any], args_to_skip: Sequence[str] = ()) -> None:
        name = callable_name(tool)
        schema = tool_schema(tool, args_to_skip=args_to_skip)
        if name in self.tool_map:
            self.remove_tool(name)
        self.tools.append(tool)
        self.tool_map[name] = tool
        self.skipped_args[name] = list(args_to_skip)
        if self.oai_tools is None:
            self.oai_tools = []
        self.oai_tools.append(schema)

    def remove_tool(self, name: str) -> None:
        tool = self.tool_map.pop(name)
        self.tools.remove(tool)
        self.skipped_args.pop(name, None)
        self.oai_tools = [t for t in self.oai_tools or [] if t["function"]["name"] != name]

    async def is_completed(self, messages: Messages, state: State, **kwargs: Any) -> bool:
        if await super().is_completed(messages, state, **kwargs):
            return True
        if isinstance(messages, str) or not messages or state.get("turn", 0) == 0:
            return False
        last = messages[-1]
        return last.get("role") == "assistant" and not last.get("tool_calls")

    async def prepare_tool_args(
        self, tool_name: str, tool_args: dict[str, Any], messages: Messages, state: State, **kwargs: Any
    ) -> dict[str, Any]:
        """Hook to change or add arguments before a call (`StatefulToolEnv` injects hidden ones)."""
        return tool_args

    async def run_tool(self, tool_name: str, tool_args: dict[str, Any]) -> Any:
        """Run one tool and return its raw result; raises a `ToolError` saying what went wrong."""
        hidden = {k: tool_args[k] for k in self.skipped_args.get(tool_name, ()) if k in tool_args}
        visible = {k: v for k, v in tool_args.items() if k not in hidden}
        return await call_tool(
            self.tool_map, tool_name, visible, timeout_s=self.tool_timeout_s, extra_args=hidden or None
        )

    def tool_error_message(self, exc: ToolError, tool_call_id: str, state: State | None) -> Message:
        """The tool message for a failed call; the error is also counted in ``state["tool_errors"]``."""
        if state is not None:
            state.setdefault("tool_errors", []).append(RolloutError.from_exception(exc, where="tool"))
        # A tool's own exception reaches error_formatter as itself (as in 0.1.x), not wrapped.
        shown: Exception = exc
        if isinstance(exc, ToolExecutionError) and isinstance(exc.__cause__, Exception):
            shown = exc.__cause__
        return {"role": "tool", "content": self.error_formatter(shown), "tool_call_id": tool_call_id}

    async def call_tool(self, tool_name: str, tool_args: dict[str, Any], tool_call_id: str, **kwargs: Any) -> Message:
        """Run one tool and return its tool message (0.1.x signature and behaviour).

        The result is sent as ``str(result)``. Failures (unknown tool, wrong arguments,
        an exception in the tool, a timeout) never raise: they come back as the tool
        message, formatted by ``error_formatter``, so the model can correct itself.
        """
        try:
            result = await self.run_tool(tool_name, tool_args)
        except ToolError as exc:
            return self.tool_error_message(exc, tool_call_id, kwargs.get("state"))
        return {"role": "tool", "content": str(result), "tool_call_id": tool_call_id}

    async def env_response(self, messages: Messages, state: State, **kwargs: Any) -> list[Message]:
        if isinstance(messages, str):
            raise EnvError("ToolEnv needs message_type='chat'")
        out: list[Message] = []
        for tc in messages[-1].get("tool_calls") or []:
            call_id = str(tc.get("id") or "") if isinstance(tc, dict) else str(getattr(tc, "id", "") or "")
            try:
                call_id, name, raw = parse_tool_call(tc)
                args = parse_arguments(name, raw)
                args = await self.prepare_tool_args(name, args, messages, state, **kwargs)
            except ToolError as exc:  # malformed call: answered, never a crash
                out.append(self.tool_error_message(exc, call_id, state))
                continue
            out.append(await self.call_tool(name, args, call_id, state=state))
        return out


class StatefulToolEnv(ToolEnv):
    """ToolEnv whose tools take per-rollout arguments the model never sees (a sandbox id, a session).

    Register such tools with ``add_tool(fn, args_to_skip=["sandbox_id"])`` and fill
    the hidden arguments in ``update_tool_args``.
    """

    def update_tool_args(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Return the arguments to call the tool with. 0.1.x signatures
        ``(tool_args, messages, state, **kwargs)`` and ``(tool_name, tool_args, messages, state, **kwargs)``
        are both accepted when overriding: arguments are passed by keyword."""
        return kwargs["tool_args"]

    async def prepare_tool_args(
        self, tool_name: str, tool_args: dict[str, Any], messages: Messages, state: State, **kwargs: Any
    ) -> dict[str, Any]:
        call_kwargs: dict[str, Any] = {"tool_args": tool_args, "messages": messages, "state": state, **kwargs}
        if self._update_takes_tool_name():
            call_kwargs["tool_name"] = tool_name
        updated = await maybe_await(self.update_tool_args(**call_kwargs))
        return dict(updated) if updated is not None else tool_args

    def _update_takes_tool_name(self) -> bool:
        cached = getattr(self, "_takes_tool_name", None)
        if cached is None:
            params = inspect.signature(self.update_tool_args).parameters
            cached = "tool_name" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())
            self._takes_tool_name = cached
        return cached
