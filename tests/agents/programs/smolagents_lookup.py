"""A smolagents ToolCallingAgent that plans before every step (``planning_interval=1`` by default).

Runs in its own virtualenv (tests/agents/requirements-smolagents.txt), unchanged by the tests:
it reads its endpoint from the environment (OPENAI_BASE_URL, OPENAI_API_KEY, OPENAI_MODEL)
through smolagents' ``OpenAIServerModel``, has one tool, ``lookup(key)``, reading the task's
table from VF_INFO, and prints the agent's final answer as its last line of output.

Planning makes the model's history non-linear: a planning call sees the task and a summary
of the memory (no system prompt, earlier plans dropped), the action calls see the system
prompt, the task and the plan. So the calls of one run are not one growing conversation. Even without planning
(``--planning-interval 0``) smolagents keeps its memory as text: a tool call the model made
comes back in the next prompt as an assistant message "Calling tools: [...]", not as the
structured call it sampled.
"""

import argparse
import json
import os

from smolagents import OpenAIServerModel, ToolCallingAgent, tool
from smolagents.monitoring import LogLevel


@tool
def lookup(key: str) -> str:
    """Read the value stored under a key in the task's table.

    Args:
        key: The key to look up, e.g. "A".
    """
    table = json.loads(os.environ.get("VF_INFO") or "{}").get("table", {})
    return str(table.get(key, f"no key {key!r}"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--planning-interval", type=int, default=1, help="plan every N steps (0: never plan)")
    args = parser.parse_args()
    model = OpenAIServerModel(
        model_id=os.environ["OPENAI_MODEL"],
        api_base=os.environ["OPENAI_BASE_URL"],
        api_key=os.environ["OPENAI_API_KEY"],
    )
    agent = ToolCallingAgent(
        tools=[lookup],
        model=model,
        planning_interval=args.planning_interval or None,
        max_steps=4,
        verbosity_level=LogLevel.OFF,
    )
    answer = agent.run(os.environ["VF_TASK"])
    print(answer)


if __name__ == "__main__":
    main()
