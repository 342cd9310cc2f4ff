"""A stdio MCP server whose tools change while it runs, for tests/envs/test_mcp_env.py (the MCP SDK).

``grow(name)`` adds a tool ``name`` that answers "<name> is here"; ``prune(name)`` removes it. Each
then sends ``notifications/tools/list_changed``, as a server must when its tools change.
"""

try:  # mcp 2.x
    from mcp.server import MCPServer
    from mcp.server.mcpserver import Context
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import Context
    from mcp.server.fastmcp import FastMCP as MCPServer

server = MCPServer("growing")


@server.tool()
async def grow(name: str, ctx: Context) -> str:
    """Add a tool called `name`."""

    def added() -> str:
        return f"{name} is here"

    server.add_tool(added, name=name, description=f"{name}: added at runtime")
    await ctx.session.send_tool_list_changed()
    return f"added {name}"


@server.tool()
async def prune(name: str, ctx: Context) -> str:
    """Remove the tool called `name`."""
    server.remove_tool(name)
    await ctx.session.send_tool_list_changed()
    return f"removed {name}"


if __name__ == "__main__":
    server.run()
