"""A tool-using environment in ~30 lines, run against the scripted server.

The stand-in model first calls ``add`` (once with broken JSON, to show that the
error goes back to the model instead of crashing the rollout), then answers.

    python examples/tool_env.py
"""

from __future__ import annotations

import asyncio

import verifiers as vf
from verifiers.testing import ScriptedReply, ScriptedServer, ScriptedToolCall, ServerScript


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first addend.
        b: The second addend.
    """
    return a + b


def load_environment() -> vf.Environment:
    rows = [{"question": f"What is {i} + {i * 2}? Use the add tool.", "answer": str(3 * i)} for i in range(1, 9)]
    return vf.ToolEnv(
        tools=[add],
        dataset=rows,
        max_turns=4,
        rubric=vf.RubricGroup([vf.MathRubric(), vf.ToolRubric(tools=[add])]),
    )


async def main() -> None:
    script = ServerScript(
        replies=[
            ScriptedReply(turn=0, content=None, tool_calls=[ScriptedToolCall(name="add", arguments="{broken")]),
            ScriptedReply(turn=1, content=None, tool_calls=[ScriptedToolCall(name="add", arguments='{"a": 1, "b": 2}')]),
            ScriptedReply(content="The answer is \\boxed{3}."),
        ]
    )
    async with ScriptedServer(script) as server:
        client = vf.make_client(server.base_url)
        out = await load_environment().a_evaluate(client, "scripted", num_examples=8)
        await client.close()
    for message in out.completion[0]:
        print(f"{message['role']:>9}: {message.get('content') or message.get('tool_calls')}")
    print("rewards:", out.reward)
    print("metrics:", {k: sum(v) / len(v) for k, v in out.metrics.items()})


if __name__ == "__main__":
    asyncio.run(main())
