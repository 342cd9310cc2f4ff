"""MCPToolEnv: a ToolEnv whose tools come from MCP servers run over stdio.

``vf.MCPToolEnv(mcp_servers=[{"name": "calc", "command": "python", "args": ["-m", "mcp_server_calculator"]}],
dataset=...)``. Needs the ``mcp`` extra (``pip install -e ".[mcp]"``); without it the
constructor raises a `ConfigError` with that command.

The servers start on the first rollout (or ``await env.start()``), all rollouts share
them, and their tools are offered to the model under their own names, prefixed
``<server>_<tool>`` only where two servers (or a Python tool passed as ``tools=``) use
the same name. With ``per_rollout=True`` every rollout starts its own servers and stops
them in `cleanup_state`, for servers that keep state. Every failure of a call (an error
result, an MCP error, an unknown tool, bad JSON, a timeout, a server that died) becomes
an ``Error: ...`` tool message; a shared server that died is started again for the next
rollout, and if that fails its tools answer that it is gone. ``close()`` (or leaving
``async with env:``) stops the servers; a finalizer and atexit do so as a safety net.

A server may change its tools while it runs (``notifications/tools/list_changed``): its tools
are listed again, and after the environment's response to the turn in which that happened the
model is offered the new list and can call the new tools. The environment has one list of tool
schemas: with ``per_rollout=True`` a rollout's calls go to its own servers' tools, but the list
offered to every rollout is the one listed last.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from verifiers.envs.tool_env import ToolEnv
from verifiers.errors import ConfigError, ToolError, ToolNotFoundError, ToolTimeoutError
from verifiers.tools.background_loop import BackgroundLoop
from verifiers.tools.mcp_client import (
    MCPConnection,
    MCPServerConfig,
    MCPServerDown,
    MCPTool,
    exposed_names,
    parse_server_configs,
    require_mcp,
)
from verifiers.types import Message, Messages, State

__all__ = ["MCPServerConfig", "MCPToolEnv"]

logger = logging.getLogger(__name__)

_STATE_KEY = "_mcp_servers"  # the rollout's own servers (per_rollout=True), removed in cleanup_state


class MCPServerSet:
    """The servers of one environment (shared) or one rollout (``per_rollout=True``)."""

    def __init__(self, configs: Sequence[MCPServerConfig], start_timeout_s: float) -> None:
        self.connections = {c.name: MCPConnection(c, start_timeout_s) for c in configs}
        self.gone: dict[str, str] = {}
        """Servers that died and could not be started again, with why."""
        self.exposed: dict[str, MCPTool] = {}
        """Name offered to the model -> tool, as of the listing `learned` counts."""
        self.learned: tuple[int, ...] = ()

    @property
    def tools(self) -> list[MCPTool]:
        return [t for c in self.connections.values() for t in c.tools]

    @property
    def version(self) -> tuple[int, ...]:
        """Changes whenever a server lists its tools (it started, or said they changed)."""
        return tuple(c.tools_version for c in self.connections.values())

    async def settle(self, timeout_s: float) -> None:
        """Wait for the listings that servers' ``tools/list_changed`` notifications started."""
        await asyncio.gather(*(c.settle(timeout_s) for c in self.connections.values()))

    async def start(self) -> None:
        """Start all servers at once; if one fails, stop the others and raise its error."""
        results = await asyncio.gather(*(c.start() for c in self.connections.values()), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            await self.close()
            raise errors[0]

    async def restart_down(self) -> None:
        """Start again each server that died; one that fails to start is marked gone for good."""
        for name, conn in self.connections.items():
            if conn.alive or name in self.gone:
                continue
            logger.warning("MCP server %r is down (%s); starting it again", name, conn.down_reason)
            try:
                await conn.start()
            except ConfigError as exc:
                self.gone[name] = str(exc).splitlines()[0]
                logger.error("%s; its tools answer with an error from now on", self.gone[name])

    async def call(self, server: str, tool: str, arguments: dict[str, Any]) -> str:
        if server in self.gone:
            raise MCPServerDown(f"MCP server {server!r} is gone: it stopped and could not be started again.")
        return await self.connections[server].call(tool, arguments)

    async def close(self) -> None:
        await asyncio.gather(*(c.close() for c in self.connections.values()), return_exceptions=True)


class _OpenSets:
    """Every server set an environment has open; what `close()` and the finalizer stop."""

    def __init__(self) -> None:
        self.sets: set[MCPServerSet] = set()

    async def close_all(self) -> None:
        sets, self.sets = list(self.sets), set()
        await asyncio.gather(*(s.close() for s in sets), return_exceptions=True)


def _shutdown(loop: BackgroundLoop, open_sets: _OpenSets) -> None:
    """Stop all servers and the background loop (from sync code: close(), a finalizer, atexit)."""
    if not loop.running:
        return
    try:
        loop.run_sync(open_sets.close_all(), timeout_s=30.0)
    except Exception as exc:  # never raise from a finalizer; the SDK has already killed what it could
        logger.warning("stopping MCP servers failed: %r", exc)
    loop.stop()


class MCPToolEnv(ToolEnv):
    """Tools from stdio MCP servers (and optional Python ``tools=``); see the module docstring."""

    def __init__(
        self,
        mcp_servers: Sequence[dict[str, Any] | MCPServerConfig],
        per_rollout: bool = False,
        tools: Sequence[Callable[..., Any]] | None = None,
        max_turns: int = 10,
        tool_timeout_s: float | None = 30.0,
        start_timeout_s: float = 60.0,
        **kwargs: Any,
    ) -> None:
        require_mcp("MCPToolEnv")
        self.mcp_servers = parse_server_configs(list(mcp_servers) if mcp_servers is not None else None)
        self.per_rollout = per_rollout
        self.start_timeout_s = start_timeout_s
        self.mcp_tools: dict[str, MCPTool] = {}
        """Name offered to the model -> the server's tool; filled when the servers first start."""
        super().__init__(tools=tools, max_turns=max_turns, tool_timeout_s=tool_timeout_s, **kwargs)
        self._loop = BackgroundLoop(f"vf-mcp-{'-'.join(c.name for c in self.mcp_servers)}")
        self._open = _OpenSets()
        self._shared: MCPServerSet | None = None
        self._lock: asyncio.Lock | None = None  # used on the background loop only
        self._finalizer = weakref.finalize(self, _shutdown, self._loop, self._open)

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the servers now and list their tools (the first rollout does it otherwise)."""
        if self.per_rollout:
            servers = await self._loop.run(self._start_set())
            self._learn_tools(servers)
            await self._loop.run(self._close_set(servers))
        else:
            self._learn_tools(await self._loop.run(self._shared_servers()))

    def close(self) -> None:
        """Stop every server this environment started. The environment stays usable: a later
        rollout starts them again."""
        _shutdown(self._loop, self._open)
        self._shared = None
        self._lock = None

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    async def __aenter__(self) -> MCPToolEnv:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __enter__(self) -> MCPToolEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- on the background loop ---------------------------------------------------------------
    async def _start_set(self) -> MCPServerSet:
        servers = MCPServerSet(self.mcp_servers, self.start_timeout_s)
        self._open.sets.add(servers)
        try:
            await servers.start()
        except BaseException:
            self._open.sets.discard(servers)
            raise
        return servers

    async def _close_set(self, servers: MCPServerSet) -> None:
        self._open.sets.discard(servers)
        await servers.close()

    async def _shared_servers(self) -> MCPServerSet:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._shared is None:
                self._shared = await self._start_set()
            else:
                await self._shared.restart_down()
            return self._shared

    # -- rollouts ----------------------------------------------------------------------------
    def _learn_tools(self, servers: MCPServerSet) -> None:
        """Offer the servers' tools to the model, as they last listed them (new lists replace, never mutate,
        the old ones: a rollout in flight reads whole lists)."""
        version = servers.version
        if version == servers.learned:
            return
        before = set(self.mcp_tools)
        exposed = exposed_names(servers.tools, taken=set(self.tool_map))
        servers.exposed, servers.learned = exposed, version
        self.mcp_tools = exposed
        python_schemas = [s for s in self.oai_tools or [] if s["function"]["name"] in self.tool_map]
        self.oai_tools = python_schemas + [t.openai_schema(name) for name, t in exposed.items()]
        if before and set(exposed) != before:
            logger.info("MCP tools changed: added %s, removed %s", sorted(set(exposed) - before) or "none",
                        sorted(before - set(exposed)) or "none")

    async def env_response(self, messages: Messages, state: State, **kwargs: Any) -> list[Message]:
        """The tool messages; then, if a server said its tools changed, the new list for the next turn."""
        out = await super().env_response(messages, state, **kwargs)
        servers = state.get(_STATE_KEY) if self.per_rollout else self._shared
        if isinstance(servers, MCPServerSet):
            await self._loop.run(servers.settle(self.tool_timeout_s or 30.0))
            self._learn_tools(servers)
        return out

    async def setup_state(self, state: State, **kwargs: Any) -> State:
        state = await super().setup_state(state, **kwargs)
        if self.per_rollout:
            servers = await self._loop.run(self._start_set())
            state[_STATE_KEY] = servers
        else:
            servers = await self._loop.run(self._shared_servers())
        self._learn_tools(servers)
        return state

    async def cleanup_state(self, state: State) -> None:
        servers = state.pop(_STATE_KEY, None)
        if isinstance(servers, MCPServerSet):
            # shielded: on Ctrl-C the rollout task is being cancelled, the servers must still stop
            with contextlib.suppress(Exception):
                await asyncio.shield(self._loop.run(self._close_set(servers)))
        await super().cleanup_state(state)

    async def call_tool(self, tool_name: str, tool_args: dict[str, Any], tool_call_id: str, **kwargs: Any) -> Message:
        """Answer one call: a Python tool as in ToolEnv, an MCP tool with its result text."""
        if tool_name in self.tool_map:
            return await super().call_tool(tool_name, tool_args, tool_call_id, **kwargs)
        state = kwargs.get("state")
        try:
            text = await self._call_mcp(tool_name, tool_args, state)
        except ToolError as exc:
            return self.tool_error_message(exc, tool_call_id, state)
        return {"role": "tool", "content": text, "tool_call_id": tool_call_id}

    async def _call_mcp(self, name: str, arguments: dict[str, Any], state: State | None) -> str:
        servers = (state or {}).get(_STATE_KEY) if self.per_rollout else self._shared
        exposed = servers.exposed if isinstance(servers, MCPServerSet) and servers.exposed else self.mcp_tools
        tool = exposed.get(name)
        if tool is None:
            available = ", ".join(sorted([*self.tool_map, *exposed])) or "(none)"
            raise ToolNotFoundError(f"Unknown tool {name!r}. Available tools: {available}.")
        if not isinstance(servers, MCPServerSet):
            raise MCPServerDown(f"MCP server {tool.server!r} is not running (the environment was closed).")
        try:
            return await asyncio.wait_for(
                self._loop.run(servers.call(tool.server, tool.name, arguments)), self.tool_timeout_s
            )
        except TimeoutError:
            raise ToolTimeoutError(f"Tool {name!r} timed out after {self.tool_timeout_s:g} s.") from None
