"""MCP stdio servers as tool providers: start one, list its tools, call them, stop it.

The ``mcp`` package (the ``mcp`` extra) is imported only when a server starts, so
``import verifiers`` never needs it. Results and tools are read by field name in both
SDK spellings (1.x ``inputSchema``/``isError``/``structuredContent``, 2.x snake_case).

Everything in `MCPConnection` runs on one event loop (a `BackgroundLoop` in practice):
the SDK's stdio client is a context manager that a single task must enter and leave,
so each connection keeps it open in a task of its own until `MCPConnection.close`.
Every failure a tool call can meet comes out as a `ToolError` written for the model.
A server that sends ``notifications/tools/list_changed`` is asked for its tools again;
`MCPConnection.settle` waits for that listing, and ``tools_version`` counts the listings.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import tempfile
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from verifiers.errors import ConfigError, ToolError, ToolExecutionError
from verifiers.install_hint import install_command

logger = logging.getLogger(__name__)

CONNECTION_CLOSED = -32000  # JSON-RPC code the SDK (1.x and 2.x) raises when the server's pipe closed
TOOLS_CHANGED = "notifications/tools/list_changed"
_STDERR_TAIL = 2000


class MCPServerConfig(BaseModel):
    """One stdio MCP server: ``command args...``, started with ``env`` on top of the SDK's allow-list.

    The SDK passes only a few variables of ours (HOME, PATH, USER, SHELL, TERM, LOGNAME)
    to the server; anything else it needs (an API key) must be given in ``env``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,40}$")
    """Used in tool names on a clash (``<name>_<tool>``), so letters, digits, ``_`` and ``-`` only."""
    command: str = Field(min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None

    @field_validator("args", mode="before")
    @classmethod
    def _args_not_a_string(cls, value: Any) -> Any:
        if isinstance(value, str):
            raise ValueError('args must be a list of strings, e.g. ["-m", "my_server"], not one string')
        return value


def parse_server_configs(servers: Any) -> list[MCPServerConfig]:
    """Validate ``mcp_servers`` into configs; a `ConfigError` names the bad entry and field."""
    if not isinstance(servers, list | tuple) or not servers:
        raise ConfigError(
            'mcp_servers must be a non-empty list of {"name", "command", "args", "env"} dicts, '
            f"got {servers!r}"
        )
    configs = []
    for i, entry in enumerate(servers):
        try:
            configs.append(entry if isinstance(entry, MCPServerConfig) else MCPServerConfig.model_validate(entry))
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'entry'}: {e['msg']}" for e in exc.errors())
            raise ConfigError(f"mcp_servers[{i}] is invalid: {problems}") from None
    names = [c.name for c in configs]
    if dupes := sorted({n for n in names if names.count(n) > 1}):
        raise ConfigError(f"mcp_servers: each server needs its own name; repeated: {', '.join(dupes)}")
    return configs


def require_mcp(what: str) -> None:
    """Raise a `ConfigError` with the install command when the ``mcp`` package is missing."""
    try:
        import mcp.client.stdio  # noqa: F401
    except ImportError as exc:
        raise ConfigError(f"{what} needs the 'mcp' package, which is not installed: "
                          f"{install_command('mcp')} (or: pip install \"mcp>=2,<3\")") from exc


def field(obj: Any, snake: str, camel: str) -> Any:
    """A field of an SDK object or plain dict under its 2.x (snake_case) or 1.x (camelCase) name."""
    for name in (snake, camel):
        value = obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)
        if value is not None:
            return value
    return None


@dataclass(frozen=True)
class MCPTool:
    """A tool as a server lists it."""

    server: str
    name: str
    description: str
    input_schema: dict[str, Any]

    def openai_schema(self, exposed_name: str) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": exposed_name,
                "description": self.description,
                "parameters": self.input_schema or {"type": "object", "properties": {}},
            },
        }


def tool_from_listing(server: str, tool: Any) -> MCPTool:
    schema = field(tool, "input_schema", "inputSchema")
    return MCPTool(
        server=server,
        name=str(field(tool, "name", "name")),
        description=str(field(tool, "description", "description") or ""),
        input_schema=dict(schema) if isinstance(schema, dict) else {"type": "object", "properties": {}},
    )


def result_text(result: Any) -> tuple[str, bool]:
    """(text for the tool message, is_error) of a ``CallToolResult``.

    The text parts joined by newlines; when there are none, the structured content as JSON;
    other parts (images, resources) are named, not dropped silently.
    """
    parts = field(result, "content", "content") or []
    texts = []
    for part in parts:
        kind = field(part, "type", "type")
        if kind == "text":
            texts.append(str(field(part, "text", "text") or ""))
        elif kind is not None:
            texts.append(f"[{kind} content]")
    text = "\n".join(texts)
    structured = field(result, "structured_content", "structuredContent")
    if not any(t.strip() for t in texts) and structured is not None:
        text = json.dumps(structured, ensure_ascii=False)
    return text, bool(field(result, "is_error", "isError"))


def _is_connection_lost(exc: BaseException) -> bool:
    if getattr(exc, "code", None) == CONNECTION_CLOSED:
        return True
    error = getattr(exc, "error", None)
    if getattr(error, "code", None) == CONNECTION_CLOSED:
        return True
    # anyio's stream errors, if the session writes after the pipe broke
    return type(exc).__name__ in {"ClosedResourceError", "BrokenResourceError", "EndOfStream"}


def _innermost(exc: BaseException) -> BaseException:
    """The error inside anyio's task-group wrapping (``ExceptionGroup: unhandled errors...``)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


class MCPServerDown(ToolError):
    """The server process is not running (it exited, or was stopped)."""


class MCPConnection:
    """One running stdio server and its client session, owned by a task on the current loop."""

    def __init__(self, config: MCPServerConfig, start_timeout_s: float = 60.0) -> None:
        self.config = config
        self.start_timeout_s = start_timeout_s
        self.tools: list[MCPTool] = []
        self.tools_version = 0
        """How many times the tools were listed (the start, and each ``tools/list_changed`` since)."""
        self.down_reason: str | None = None
        """Why the server is not usable (set when it dies or is closed), None while it runs."""
        self._session: Any = None
        self._task: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._stderr_path: str | None = None
        self._changed: asyncio.Event | None = None  # the server said its tools changed; not listed yet
        self._listed: asyncio.Event | None = None  # set while the tools listed are the server's latest

    @property
    def alive(self) -> bool:
        return self._session is not None and self.down_reason is None

    def stderr_tail(self) -> str:
        if not self._stderr_path:
            return ""
        try:
            with open(self._stderr_path, encoding="utf-8", errors="replace") as f:
                return f.read()[-_STDERR_TAIL:].strip()
        except OSError:
            return ""

    async def start(self) -> list[MCPTool]:
        """Spawn the server, initialise the session and list its tools (all pages).

        A connection that ran before is closed first, so its old task can no longer touch
        the state of the new one.
        """
        if self._task is not None:
            await self.close()
        self.down_reason = None
        fd, self._stderr_path = tempfile.mkstemp(prefix=f"vf-mcp-{self.config.name}-", suffix=".log")
        os.close(fd)
        ready: asyncio.Future[list[MCPTool]] = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()
        self._changed, self._listed = asyncio.Event(), asyncio.Event()
        self._task = asyncio.create_task(self._serve(ready), name=f"mcp-server-{self.config.name}")
        try:
            self.tools = await asyncio.wait_for(asyncio.shield(ready), self.start_timeout_s)
            self.tools_version += 1
        except BaseException as exc:
            tail = self.stderr_tail()  # before close() removes the log
            await self.close()
            if isinstance(exc, TimeoutError):
                reason = f"it did not answer initialize + tools/list within {self.start_timeout_s:g} s"
            elif isinstance(exc, Exception):
                leaf = _innermost(exc)
                reason = f"{type(leaf).__name__}: {leaf}"
            else:
                raise
            raise ConfigError(
                f"MCP server {self.config.name!r} ({self.config.command} {' '.join(self.config.args)}) "
                f"failed to start: {reason}" + (f"\nits stderr:\n{tail}" if tail else "")
            ) from None
        return self.tools

    async def _serve(self, ready: asyncio.Future[list[MCPTool]]) -> None:
        from mcp import ClientSession, StdioServerParameters
        from mcp.client.stdio import stdio_client

        params = StdioServerParameters(
            command=self.config.command, args=list(self.config.args), env=dict(self.config.env) or None,
            cwd=self.config.cwd,
        )
        assert self._stop is not None and self._stderr_path is not None
        try:
            with open(self._stderr_path, "w", encoding="utf-8") as errlog:
                async with stdio_client(params, errlog=errlog) as (read, write), \
                        ClientSession(read, write, message_handler=self._on_message) as session:
                    await session.initialize()
                    tools = await self._list_tools(session)
                    self._session = session
                    ready.set_result(tools)
                    await self._refresh_until_stopped(session)
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else asyncio.CancelledError())
            elif isinstance(exc, Exception):
                logger.warning("MCP server %r: its connection ended with %r", self.config.name, exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            self._session = None
            if self._listed is not None:
                self._listed.set()  # nothing more will be listed: settle() must not wait for it
            if self.down_reason is None:
                self.down_reason = "it was stopped"

    async def _list_tools(self, session: Any) -> list[MCPTool]:
        """All pages of ``tools/list``."""
        from mcp.types import PaginatedRequestParams

        tools: list[MCPTool] = []
        cursor = None
        while True:
            page = await session.list_tools(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
            tools += [tool_from_listing(self.config.name, t) for t in page.tools]
            cursor = field(page, "next_cursor", "nextCursor")
            if not cursor:
                return tools

    async def _on_message(self, message: Any) -> None:
        """The session's message handler: note a ``tools/list_changed`` (1.x wraps it in ``.root``).

        Only noted here: the SDK may run this handler inside its receive loop, where awaiting a
        request of our own would wait for ourselves; `_refresh_until_stopped` lists the tools.
        """
        method = getattr(getattr(message, "root", message), "method", None)
        if method == TOOLS_CHANGED and self._changed is not None and self._listed is not None:
            self._listed.clear()
            self._changed.set()

    async def _refresh_until_stopped(self, session: Any) -> None:
        """List the tools again after each ``tools/list_changed``, until the connection is stopped."""
        assert self._stop is not None and self._changed is not None and self._listed is not None
        self._listed.set()
        while not self._stop.is_set():
            stop, changed = asyncio.ensure_future(self._stop.wait()), asyncio.ensure_future(self._changed.wait())
            try:
                await asyncio.wait({stop, changed}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stop.cancel()
                changed.cancel()
            if self._stop.is_set():
                return
            self._changed.clear()
            try:
                tools = await self._list_tools(session)
            except Exception as exc:  # the server is dying or broken: the next call says so
                logger.warning("MCP server %r said its tools changed, but listing them failed: %r; keeping the "
                               "tools listed before", self.config.name, exc)
            else:
                self.tools = tools
                self.tools_version += 1
            if not self._changed.is_set():
                self._listed.set()

    async def settle(self, timeout_s: float = 30.0) -> None:
        """Wait until the tools listed are the latest the server announced (a listing in flight ends)."""
        if self._listed is None or self._listed.is_set():
            return
        try:
            await asyncio.wait_for(self._listed.wait(), timeout_s)
        except TimeoutError:
            logger.warning("MCP server %r: its changed tools were not listed within %g s; keeping the tools "
                           "listed before", self.config.name, timeout_s)

    async def call(self, tool: str, arguments: dict[str, Any]) -> str:
        """Call ``tool``; its text, or a `ToolError` (error result, MCP error, server down)."""
        session = self._session
        if session is None or self.down_reason is not None:
            raise MCPServerDown(f"MCP server {self.config.name!r} is not running ({self.down_reason or 'not started'}).")
        try:
            result = await session.call_tool(tool, arguments=arguments)
        except Exception as exc:
            if _is_connection_lost(exc) or self._task is None or self._task.done():
                await self._mark_down("its process ended (connection closed)")
                raise MCPServerDown(
                    f"MCP server {self.config.name!r} did not answer the call to {tool!r}: its process has ended."
                ) from None
            code = getattr(exc, "code", None) or getattr(getattr(exc, "error", None), "code", None)  # 2.x, 1.x
            detail = f"MCP error {code}: {exc}" if isinstance(code, int) else f"{type(exc).__name__}: {exc}"
            raise ToolExecutionError(f"Tool {tool!r} failed: {detail}") from None
        text, is_error = result_text(result)
        if is_error:
            raise ToolExecutionError(f"Tool {tool!r} failed: {text or '(the server gave no reason)'}")
        return text

    async def _mark_down(self, reason: str) -> None:
        if self.down_reason is None:
            self.down_reason = reason
            tail = self.stderr_tail()
            logger.warning(
                "MCP server %r is down: %s%s", self.config.name, reason, f"; its stderr ends:\n{tail}" if tail else ""
            )
        if self._stop is not None:
            self._stop.set()

    async def close(self) -> None:
        """Stop the server (the SDK closes stdin, then terminates/kills its process group)."""
        if self.down_reason is None:
            self.down_reason = "it was stopped"
        if self._stop is not None:
            self._stop.set()
        task, self._task = self._task, None
        if task is not None and not task.done():
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(task), 20.0)
            if not task.done():
                task.cancel()
        self._drop_log()

    def _drop_log(self) -> None:
        path, self._stderr_path = self._stderr_path, None
        if path:
            with contextlib.suppress(OSError):
                os.unlink(path)


_NAME_RE = re.compile(r"[^A-Za-z0-9_-]")


def exposed_names(tools: list[MCPTool], taken: set[str] = frozenset()) -> dict[str, MCPTool]:  # type: ignore[assignment]
    """The name the model sees for each tool: its own, or ``<server>_<tool>`` when two servers
    (or a Python tool in ``taken``) share it."""
    counts: dict[str, int] = {}
    for t in tools:
        counts[t.name] = counts.get(t.name, 0) + 1
    out: dict[str, MCPTool] = {}
    for t in tools:
        name = t.name if counts[t.name] == 1 and t.name not in taken else f"{t.server}_{t.name}"
        name = _NAME_RE.sub("_", name)[:64]
        if name in out or name in taken:
            raise ConfigError(
                f"MCP tool {t.name!r} of server {t.server!r} would be offered as {name!r}, which is taken; "
                "rename the server"
            )
        out[name] = t
    return out
