"""`Toolset.run()`: a toolset as an MCP server, the way upstream starts one (``python -m <its module>``).

Upstream's launcher runs a toolset's module in the rollout's runtime with ``MCP_PORT_FILE`` (or a
fixed ``MCP_PORT``) and ``VF_CONFIG`` (the toolset config as JSON) set, reads the port the server
reports and calls its tools over MCP's streamable HTTP. A toolset module ends in
``if __name__ == "__main__": MyToolset.run()`` for that reason, so the same module must run
here too: with either variable set it serves streamable HTTP on ``MCP_HOST`` (127.0.0.1 by
default), the port written to ``MCP_PORT_FILE``; with neither it serves on stdin/stdout, which
is how our `MCPEnv` starts MCP servers (``{"command": "python", "args": ["-m", "pkg.toolset"]}``).

Tools are registered under their own names on a server named like the toolset (upstream's
client prefixes them: ``arithmetic`` + ``add`` → ``arithmetic_add``). Over MCP there is no
rollout: ``self.state`` is the toolset's own state object, shared by every call the process serves.
"""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path
from typing import Any

from verifiers.tools.mcp_client import require_mcp


def serve(toolset: Any) -> None:
    """Serve ``toolset`` (a `verifiers.v1.toolset.Toolset`; not imported here, it imports this module)
    over MCP until the process is stopped (see the module docstring)."""
    require_mcp("serving a v1 Toolset over MCP")
    from mcp.server import MCPServer

    server = MCPServer(toolset.server_name or type(toolset).__name__)
    prefix = toolset.server_name
    for advertised, fn in toolset.tools().items():
        server.add_tool(fn, name=advertised.removeprefix(f"{prefix}_") if prefix else advertised)
    if "MCP_PORT" in os.environ or "MCP_PORT_FILE" in os.environ:
        asyncio.run(_serve_http(toolset, server))
    else:
        asyncio.run(_serve_stdio(toolset, server))


async def _serve_stdio(toolset: Any, server: Any) -> None:
    await toolset.setup()
    await server.run_stdio_async()


async def _serve_http(toolset: Any, server: Any) -> None:
    import uvicorn

    # The port is reported before setup, as upstream does, so a slow setup never looks like a dead server.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((os.environ.get("MCP_HOST", "127.0.0.1"), int(os.environ.get("MCP_PORT", "0"))))
    if port_file := os.environ.get("MCP_PORT_FILE"):
        Path(port_file).write_text(str(sock.getsockname()[1]))
    await toolset.setup()
    app = server.streamable_http_app(json_response=True, stateless_http=True)
    await uvicorn.Server(uvicorn.Config(app, log_level="critical")).serve(sockets=[sock])
