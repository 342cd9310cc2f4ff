"""A calculator agent: an ordinary OpenAI SDK tool loop, nothing from verifiers.

It reads its problem from ``VF_TASK`` (or ``TASK.md``), offers the model one tool, ``calculate``
(the calculator environment's own schema and system prompt, so the model sees the prompt it sees
there), runs every call the model makes with a safe arithmetic evaluator, and prints the model's
final answer. Run it by hand against any OpenAI-compatible server:

    OPENAI_BASE_URL=http://127.0.0.1:8000/v1 OPENAI_API_KEY=x OPENAI_MODEL=smollm2 \\
        VF_TASK="Compute (12 + 30) * 7 - 11 * 5." python calculator_agent.py

Under `vf.AgentEnv` (``vf.load_environment("calculator", program=True)``) the gateway sets those
variables per rollout, records every call with its token ids, and the rubric scores the printed answer.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from openai import OpenAI

try:  # run as a program: the file beside this one (no import of the package, so none of verifiers)
    from safe_eval import format_number, safe_eval
except ImportError:  # imported from the calculator package (its tests)
    from calculator.safe_eval import format_number, safe_eval  # type: ignore[no-redef]

SYSTEM = (
    "Solve the problem. You have a calculator tool, `calculate`, for arithmetic; use it instead of "
    "working out large products in your head. When you are done, give the final answer as a "
    "number inside \\boxed{}, e.g. \\boxed{1234}."
)
TOOLS = [{"type": "function", "function": {
    "name": "calculate",
    "description": "Evaluate an arithmetic expression and return the result.\n\nSupports numbers, + - * / // "
                   "(floor division) % (remainder) ** or ^ (power, exponent at most 100),\nunary minus and parentheses.",
    "parameters": {"properties": {"expression": {
        "description": "The arithmetic to evaluate, e.g. \"(12 + 30) * 7 // 4\".", "title": "Expression",
        "type": "string"}}, "required": ["expression"], "title": "calculate_args", "type": "object",
        "additionalProperties": False},
    "strict": True}}]


def calculate(arguments: str) -> str:
    """The tool: the call's ``expression`` evaluated, or an error the model can read."""
    try:
        expression = json.loads(arguments or "{}").get("expression")
    except (json.JSONDecodeError, AttributeError):
        return 'error: arguments must be a JSON object like {"expression": "2 + 2"}'
    if not isinstance(expression, str):
        return "error: expression must be a string"
    try:
        return format_number(safe_eval(expression))
    except (ValueError, ZeroDivisionError, OverflowError) as exc:
        return f"error: {exc}"


def main() -> None:
    task = os.environ.get("VF_TASK") or Path("TASK.md").read_text().strip()
    client = OpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY from the environment
    model = os.environ.get("OPENAI_MODEL", "policy")
    messages: list[dict] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}]
    for _ in range(int(os.environ.get("AGENT_MAX_CALLS", "4"))):
        reply = client.chat.completions.create(model=model, messages=messages, tools=TOOLS).choices[0].message
        if not reply.tool_calls:
            print(reply.content or "")
            return
        messages.append(reply.model_dump(exclude_none=True))
        for call in reply.tool_calls:
            result = calculate(call.function.arguments) if call.function.name == "calculate" else "error: no such tool"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    print("")  # out of calls: no answer


if __name__ == "__main__":
    main()
