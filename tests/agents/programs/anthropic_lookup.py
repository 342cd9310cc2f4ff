"""A tool-using program on the ``anthropic`` SDK, written as its docs write the tool-use loop.

Runs in its own virtualenv (tests/agents/requirements-anthropic.txt), unchanged by the tests:
``anthropic.Anthropic()`` reads ``ANTHROPIC_BASE_URL`` and ``ANTHROPIC_API_KEY`` from the
environment, and the program asks for a Claude model by name (the gateway answers with the
environment's model whatever the name). The loop sends the conversation, runs the tool calls
the model asks for, sends back their ``tool_result`` blocks and prints the final text.
``--stream`` uses ``client.messages.stream(...)`` and its final message instead.
"""

import json
import os
import sys

import anthropic

client = anthropic.Anthropic()
TOOLS = [{
    "name": "lookup",
    "description": "Read the value stored under a key in the task's table.",
    "input_schema": {"type": "object", "properties": {"key": {"type": "string", "description": "The key, e.g. A"}},
                     "required": ["key"]},
}]
SYSTEM = "Answer the task. Use the lookup tool to read values from the task's table. Reply with the value only."


def lookup(key: str) -> str:
    table = json.loads(os.environ.get("VF_INFO") or "{}").get("table", {})
    return str(table.get(key, f"no key {key!r}"))


def ask(messages):
    kwargs = {"model": "claude-sonnet-5-5", "max_tokens": 1024, "system": SYSTEM, "tools": TOOLS, "messages": messages}
    if "--stream" in sys.argv:
        with client.messages.stream(**kwargs) as stream:
            return stream.get_final_message()
    return client.messages.create(**kwargs)


def main() -> None:
    messages = [{"role": "user", "content": os.environ["VF_TASK"]}]
    for _ in range(4):
        response = ask(messages)
        if response.stop_reason != "tool_use":
            break
        messages.append({"role": "assistant", "content": response.content})
        results = []
        for block in response.content:
            if block.type == "tool_use":
                output = lookup(**block.input) if block.name == "lookup" else f"unknown tool {block.name}"
                results.append({"type": "tool_result", "tool_use_id": block.id, "content": output})
        messages.append({"role": "user", "content": results})
    print("".join(block.text for block in response.content if block.type == "text"))


if __name__ == "__main__":
    main()
