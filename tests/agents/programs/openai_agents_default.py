"""An OpenAI Agents SDK program as its docs write one: the default model API, the Responses API.

Runs in its own virtualenv (tests/agents/requirements-openai-agents.txt), unchanged by the
tests and with nothing for the gateway: no ``set_default_openai_api``, no client of its own.
The SDK reads ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` from the environment, as it does for
api.openai.com, and calls ``POST /responses``. (Tracing is the environment's business:
``OPENAI_AGENTS_DISABLE_TRACING=1``.)

``--stream`` runs the agent with ``Runner.run_streamed`` (the Responses event stream);
``--chain`` lets the SDK chain turns with ``previous_response_id`` (``auto_previous_response_id``)
instead of resending the conversation. One function tool, ``lookup(key)``, reads the task's
table from ``VF_INFO``.
"""

import asyncio
import json
import os
import sys

from agents import Agent, Runner, function_tool

INSTRUCTIONS = "Answer the task. Use `lookup` to read values from the task's table. Reply with the value only."


@function_tool
def lookup(key: str) -> str:
    """Read the value stored under a key in the task's table.

    Args:
        key: The key to look up, e.g. "A".
    """
    table = json.loads(os.environ.get("VF_INFO") or "{}").get("table", {})
    return str(table.get(key, f"no key {key!r}"))


agent = Agent(name="lookup-agent", instructions=INSTRUCTIONS, model=os.environ["OPENAI_MODEL"], tools=[lookup])


async def main() -> None:
    chain = "--chain" in sys.argv
    if "--stream" in sys.argv:
        result = Runner.run_streamed(agent, os.environ["VF_TASK"], max_turns=4, auto_previous_response_id=chain)
        async for _event in result.stream_events():
            pass
    else:
        result = await Runner.run(agent, os.environ["VF_TASK"], max_turns=4, auto_previous_response_id=chain)
    print(result.final_output)


if __name__ == "__main__":
    asyncio.run(main())
