"""An OpenAI Agents SDK program: one function tool and a calculator MCP server over stdio.

Runs in its own virtualenv (tests/agents/requirements-openai-agents.txt), unchanged by the
tests: like any Agents SDK app it reads its endpoint from the environment (OPENAI_BASE_URL,
OPENAI_API_KEY, OPENAI_MODEL), uses the chat completions API (what the gateway speaks), turns
tracing off (no network but the model's), and prints the agent's final output.

Tools: ``lookup(key)`` reads the task's table from VF_INFO (a plain function tool), and
``calculate(expression)`` comes from ``mcp-server-calculator``, started by the SDK's
``MCPServerStdio`` as a child process of this program.
"""

import asyncio
import json
import os
import sys

from agents import (
    Agent,
    Runner,
    function_tool,
    set_default_openai_api,
    set_default_openai_client,
    set_tracing_disabled,
)
from agents.mcp import MCPServerStdio
from openai import AsyncOpenAI

INSTRUCTIONS = (
    "Answer the task. Use `lookup` to read values from the task's table and `calculate` for "
    "arithmetic. Reply with the final number only."
)


@function_tool
def lookup(key: str) -> str:
    """Read the value stored under a key in the task's table.

    Args:
        key: The key to look up, e.g. "A".
    """
    table = json.loads(os.environ.get("VF_INFO") or "{}").get("table", {})
    return str(table.get(key, f"no key {key!r}"))


async def main() -> None:
    set_default_openai_api("chat_completions")
    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"])
    set_default_openai_client(client, use_for_tracing=False)
    calculator = MCPServerStdio(
        name="calculator",
        params={"command": sys.executable, "args": ["-m", "mcp_server_calculator"]},
        client_session_timeout_seconds=30,
    )
    async with calculator:
        agent = Agent(
            name="calculator-agent",
            instructions=INSTRUCTIONS,
            model=os.environ["OPENAI_MODEL"],
            tools=[lookup],
            mcp_servers=[calculator],
        )
        result = await Runner.run(agent, os.environ["VF_TASK"], max_turns=6)
    print(result.final_output)


if __name__ == "__main__":
    asyncio.run(main())
