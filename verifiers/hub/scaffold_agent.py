"""The ``vf-init --kind agent`` templates: an environment that runs an agent *program*.

Kept apart from the three in-library kinds in `verifiers.hub.scaffold`: this kind ships two
modules (the environment, and ``agent.py``, a plain OpenAI SDK program that knows nothing of
verifiers), and its test drives the program through the interception gateway.
"""

from __future__ import annotations

from string import Template

AGENT_MODULE = Template('''\
"""$env_id: $description

An agent-program environment: every rollout runs ``agent.py`` (a plain program on the
official openai client; it knows nothing of verifiers) as a subprocess. ``vf.AgentEnv``
points the program's ``OPENAI_BASE_URL`` at a gateway session, so its model calls go to the
model under evaluation or training and are recorded with their token ids; the rubric scores
what the program printed. Replace the program and the data with your own agent; keep
``load_environment`` (``vf.load_environment("$env_id", **env_args)`` calls it).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import verifiers as vf

__all__ = ["AGENT", "EVAL_EXAMPLES", "TRAIN_EXAMPLES", "final_answer", "load_environment", "used_tool"]

AGENT = Path(__file__).with_name("agent.py")
TRAIN_EXAMPLES = [
    {"question": "What is 17 * 23?", "answer": "391"},
    {"question": "What is 1234 + 4321?", "answer": "5555"},
    {"question": "What is 2 ** 10?", "answer": "1024"},
]
EVAL_EXAMPLES = [
    {"question": "What is 99 * 99?", "answer": "9801"},
    {"question": "What is 1000 - 1?", "answer": "999"},
]


def final_answer(state: vf.State, answer: str) -> float:
    """1.0 when the last line the program printed is the expected answer."""
    lines = str(state.get("agent", {}).get("stdout", "")).strip().splitlines()
    return float(bool(lines) and lines[-1].strip() == answer)


def used_tool(completion: vf.Messages) -> float:
    """1.0 when the program ran a tool call (a metric, weight 0)."""
    return float(any(m.get("role") == "tool" for m in completion if isinstance(m, dict)))


def load_environment(timeout_s: float = 60.0, max_calls: int = 8, **kwargs: Any) -> vf.Environment:
    """Build the $env_id environment.

    Args:
        timeout_s: Seconds one run of the program may take (its whole process tree is ended then).
        max_calls: Most model calls per rollout (the gateway answers 400 after that).
        **kwargs: Passed on to ``vf.AgentEnv`` (e.g. ``env``, ``files``, ``isolation``).
    """
    rubric = vf.Rubric(funcs=[final_answer, used_tool], weights=[1.0, 0.0])
    return vf.AgentEnv(
        command=[sys.executable, str(AGENT)],
        dataset=TRAIN_EXAMPLES,
        eval_dataset=EVAL_EXAMPLES,
        rubric=rubric,
        timeout_s=timeout_s,
        max_calls=max_calls,
        **kwargs,
    )
''')

AGENT_PROGRAM = Template('''\
"""The agent program of $env_id: an OpenAI SDK tool loop with a calculator tool.

It reads its task from ``VF_TASK`` (or ``TASK.md`` in its working directory), lets the model
call ``calculate`` until it answers, and prints the answer as its last line. It runs the same
outside verifiers: ``OPENAI_BASE_URL=... OPENAI_API_KEY=... VF_TASK="What is 2+2?" python agent.py``.
"""

from __future__ import annotations

import ast
import json
import operator
import os
from pathlib import Path

from openai import OpenAI

TOOLS = [{
    "type": "function",
    "function": {
        "name": "calculate",
        "description": "evaluate an arithmetic expression (+ - * / ** and parentheses)",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
    },
}]
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.Pow: operator.pow, ast.USub: operator.neg}


def _eval(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval(node.left), _eval(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval(node.operand))
    raise ValueError("only numbers and + - * / ** are allowed")


def calculate(arguments: str) -> str:
    try:
        expression = json.loads(arguments or "{}")["expression"]
        value = _eval(ast.parse(str(expression), mode="eval").body)
    except Exception as exc:  # the model sees the error and may try again
        return f"error: {exc}"
    return str(int(value) if float(value).is_integer() else value)


def main() -> None:
    task = os.environ.get("VF_TASK") or Path("TASK.md").read_text().strip()
    client = OpenAI()
    model = os.environ.get("OPENAI_MODEL", "gpt-4o-mini")
    messages: list[dict] = [
        {"role": "system", "content": "Use the calculate tool, then reply with only the number."},
        {"role": "user", "content": task},
    ]
    for _ in range(6):
        reply = client.chat.completions.create(model=model, messages=messages, tools=TOOLS).choices[0].message
        if not reply.tool_calls:
            print((reply.content or "").strip())
            return
        messages.append(reply.model_dump(exclude_none=True))
        for call in reply.tool_calls:
            result = calculate(call.function.arguments) if call.function.name == "calculate" else "error: no such tool"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    print("")


if __name__ == "__main__":
    main()
''')

AGENT_TEST = Template("""

def test_tool_call_then_answer_scores_full_reward() -> None:
    out = run(
        $module.load_environment(),
        ScriptedReply(turn=0, tool_calls=[ScriptedToolCall(name="calculate", arguments='{"expression": "99 * 99"}')]),
        ScriptedReply(content="{last_message}"),  # the tool's result
        num_examples=1,
    )
    assert out.error == [None]
    assert out.metrics["used_tool"] == [1.0]
    assert out.reward == [1.0]
    assert len(out.results[0].tokens) == 2  # both model calls recorded with their token ids


def test_a_wrong_answer_scores_zero() -> None:
    out = run($module.load_environment(), ScriptedReply(content="42"), num_examples=1)
    assert out.metrics["used_tool"] == [0.0]
    assert out.reward == [0.0]
""")

AGENT_DOCS = {
    "what": "Agent program: each rollout runs `$module/agent.py`, a plain OpenAI SDK program with a "
    "`calculate` tool, through `vf.AgentEnv`'s interception gateway; the reward checks the last line "
    "it prints (a placeholder task; replace the program and data; see docs/agents.md).",
    "args": "| `timeout_s` | `60.0` | seconds one run of the program may take |\n"
    "| `max_calls` | `8` | most model calls per rollout |\n"
    "| other keyword arguments | | passed to `vf.AgentEnv` (e.g. `env`, `files`, `isolation`) |",
    "metrics": "| `final_answer` | 1.0 | 1.0 when the program's last printed line is the expected answer |\n"
    "| `used_tool` | 0.0 | 1.0 when the program ran a tool call (a metric only) |",
}
