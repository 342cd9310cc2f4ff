"""A small MCP stdio server for tests/envs/test_mcp_env.py, written with the MCP Python SDK.

Tools: ``add`` (text result), ``fail`` (raises), ``reject`` (a JSON-RPC error), ``counter`` (state kept in the process),
``point`` (structured content only), ``getenv`` (what the server's environment holds),
``sleep`` (for timeouts) and ``crash`` (the process dies mid-call). Its pid goes to ``$TOY_PIDFILE`` so a test can check,
by pid, that closing the environment ended it. ``--name`` sets the server name.
"""

import os
import sys

import anyio
from mcp.types import CallToolResult

try:  # mcp 2.x
    from mcp.server import MCPServer
    from mcp.shared.exceptions import MCPError

    def rpc_error(message: str) -> Exception:
        return MCPError(code=-32602, message=message)
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as MCPServer
    from mcp.shared.exceptions import McpError
    from mcp.types import ErrorData

    def rpc_error(message: str) -> Exception:
        return McpError(ErrorData(code=-32602, message=message))

server = MCPServer(sys.argv[sys.argv.index("--name") + 1] if "--name" in sys.argv else "toy")
calls = {"n": 0}


@server.tool()
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


@server.tool()
def fail(reason: str = "boom") -> str:
    """Always raises."""
    raise ValueError(f"fail was asked to fail: {reason}")


@server.tool()
def reject() -> str:
    """Answers with a JSON-RPC error instead of a result."""
    raise rpc_error("reject refuses")


@server.tool()
def counter() -> str:
    """How many times counter was called in this server process."""
    calls["n"] += 1
    return str(calls["n"])


@server.tool()
def point(x: int) -> CallToolResult:
    """A result with structured content and no text part."""
    return CallToolResult(content=[], structured_content={"x": x, "y": 2 * x})


@server.tool()
def getenv(name: str) -> str:
    """The server's environment variable `name`, or <unset>."""
    return os.environ.get(name, "<unset>")


@server.tool()
async def sleep(seconds: float) -> str:
    """Sleep, then say so."""
    await anyio.sleep(seconds)
    return "slept"


@server.tool()
def crash() -> str:
    """Kill this server process without answering."""
    os._exit(3)


if __name__ == "__main__":
    if pidfile := os.environ.get("TOY_PIDFILE"):
        with open(pidfile, "a") as f:
            f.write(f"{os.getpid()}\n")
    server.run()
