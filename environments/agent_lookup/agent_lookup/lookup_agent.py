"""A small agent program: an OpenAI SDK tool loop, nothing from verifiers.

It reads its task from ``VF_TASK`` (or ``TASK.md``), offers the model one tool, ``lookup``,
which reads a table this program was given (``VF_INFO``'s ``table``), runs the tool calls
the model makes, and prints the model's final answer. Run it by hand against any
OpenAI-compatible server:

    OPENAI_BASE_URL=http://127.0.0.1:8000/v1 OPENAI_API_KEY=x OPENAI_MODEL=policy \\
        VF_TASK="look up A" VF_INFO='{"table": {"A": "42"}}' python environments/agent_lookup/agent_lookup/lookup_agent.py

Under `vf.AgentEnv` (environments/agent_lookup) the gateway sets those variables per rollout,
records every call with its token ids, and the rubric scores the printed answer.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from openai import OpenAI

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "read the value of a key",
            "parameters": {
                "type": "object",
                "properties": {"key": {"type": "string", "description": "the key, one letter"}},
                "required": ["key"],
            },
        },
    }
]


def lookup(table: dict[str, str], arguments: str) -> str:
    try:
        key = json.loads(arguments or "{}").get("key")
    except (json.JSONDecodeError, AttributeError):
        return "error: arguments must be a JSON object like {\"key\": \"A\"}"
    if key not in table:
        return f"error: no key {key!r}"
    return table[key]


def main() -> None:
    task = os.environ.get("VF_TASK") or Path("TASK.md").read_text().strip()
    table = json.loads(os.environ.get("VF_INFO") or "{}").get("table", {})
    client = OpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY from the environment
    model = os.environ.get("OPENAI_MODEL", "policy")
    messages: list[dict] = [{"role": "user", "content": task}]
    max_calls = int(os.environ.get("AGENT_MAX_CALLS", "3"))
    for _ in range(max_calls):
        reply = client.chat.completions.create(model=model, messages=messages, tools=TOOLS).choices[0].message
        if not reply.tool_calls:
            print(reply.content or "")
            return
        messages.append(reply.model_dump(exclude_none=True))
        for call in reply.tool_calls:
            result = lookup(table, call.function.arguments) if call.function.name == "lookup" else "error: no such tool"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    print("")  # out of calls: no answer


if __name__ == "__main__":
    main()
