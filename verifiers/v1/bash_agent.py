"""The ``bash`` harness's agent program: a chat loop with a ``bash`` tool (and ``edit``), run locally.

Upstream verifiers runs its ``bash`` harness as a program inside the task's runtime; here the
program is this module, started by `verifiers.v1.program_env.TasksetProgramEnv` through
`AgentEnv` (a subprocess per rollout in a fresh working directory, its model calls answered
through the gateway and recorded token-exactly). It uses nothing but the ``openai`` SDK and
the standard library, reads the task as AgentEnv hands it over (``VF_PROMPT``: the chat,
system prompt first) and prints the final reply.

The tools keep upstream's names and arguments: ``bash(command)`` runs ``bash -c`` in the
working directory and returns the exit code and output; ``edit(path, old_str, new_str)``
replaces a string that must occur exactly once. A malformed call gets an error as its result,
as a model's mistake should: the loop goes on.

    python -m verifiers.v1.bash_agent [--max-turns N] [--no-edit] [--command-timeout S]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

BASH_PROMPT = "You are a coding agent. You have access to a bash tool for running shell commands."
EDIT_PROMPT = "You also have an edit tool for single-occurrence string replacement in a file."
MAX_RESULT_CHARS = 10_000
"""A tool result is cut to this many characters (head and tail kept): a runaway command must not
fill the model's context."""

BASH_TOOL = {"type": "function", "function": {
    "name": "bash", "description": "Run a bash command in the working directory and return its output.",
    "parameters": {"type": "object", "properties": {
        "command": {"type": "string", "description": "The bash command to run."}}, "required": ["command"]}}}
EDIT_TOOL = {"type": "function", "function": {
    "name": "edit", "description": "Replace a unique string in a file. old_str must appear exactly once in the file.",
    "parameters": {"type": "object", "properties": {
        "path": {"type": "string", "description": "The file, relative to the working directory or absolute."},
        "old_str": {"type": "string", "description": "The text to replace (exactly one occurrence)."},
        "new_str": {"type": "string", "description": "The replacement text."}},
        "required": ["path", "old_str", "new_str"]}}}


def clip(text: str) -> str:
    if len(text) <= MAX_RESULT_CHARS:
        return text
    half = MAX_RESULT_CHARS // 2
    return f"{text[:half]}\n... [{len(text) - MAX_RESULT_CHARS} characters cut] ...\n{text[-half:]}"


def run_bash(command: Any, timeout_s: float) -> str:
    if not isinstance(command, str) or not command.strip():
        return "error: 'command' must be a non-empty string"
    try:
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, errors="replace",
                              timeout=timeout_s, stdin=subprocess.DEVNULL)  # bytes that are not UTF-8: shown as such
    except subprocess.TimeoutExpired:
        return f"error: the command ran past {timeout_s:g} s and was stopped"
    return clip(f"exit code {done.returncode}\n{done.stdout}{done.stderr}")


def run_edit(path: Any, old_str: Any, new_str: Any) -> str:
    if not all(isinstance(v, str) for v in (path, old_str, new_str)):
        return "error: 'path', 'old_str' and 'new_str' must be strings"
    if not old_str:
        return "error: 'old_str' must be a non-empty string"
    target = Path(path)
    try:
        text = target.read_text()
    except OSError as exc:
        return f"error: cannot read {path}: {exc.strerror or exc}"
    count = text.count(old_str)
    if count != 1:
        return f"error: old_str must appear exactly once in {path} (found {count})"
    target.write_text(text.replace(old_str, new_str, 1))
    return f"edited {path}"


def call_tool(name: str, raw_arguments: str, timeout_s: float) -> str:
    try:
        arguments = json.loads(raw_arguments or "{}")
    except json.JSONDecodeError as exc:
        return f"error: the arguments of {name} are not JSON ({exc.msg})"
    if not isinstance(arguments, dict):
        return f"error: the arguments of {name} must be a JSON object"
    if name == "bash":
        return run_bash(arguments.get("command"), timeout_s)
    if name == "edit":
        return run_edit(arguments.get("path"), arguments.get("old_str"), arguments.get("new_str"))
    return f"error: no tool named {name!r} (the tools are bash and edit)"


def opening_messages(prompt: Any, edit: bool) -> list[dict[str, Any]]:
    """The chat the program opens with: the harness's own system prompt before the task's, as upstream."""
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]
    own = BASH_PROMPT + (" " + EDIT_PROMPT if edit else "")
    if messages and messages[0].get("role") == "system":
        messages[0]["content"] = f"{own}\n\n{messages[0].get('content') or ''}".rstrip()
    else:
        messages.insert(0, {"role": "system", "content": own})
    return messages


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bash_agent", description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-turns", type=int, default=0, help="model calls at most (0: until it stops calling tools)")
    ap.add_argument("--no-edit", dest="edit", action="store_false", help="offer bash alone")
    ap.add_argument("--command-timeout", type=float, default=60.0, help="seconds a bash command may run")
    args = ap.parse_args(argv)
    import openai

    messages = opening_messages(json.loads(os.environ.get("VF_PROMPT") or '""'), args.edit)
    tools = [BASH_TOOL, EDIT_TOOL] if args.edit else [BASH_TOOL]
    client = openai.OpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY: the gateway's session
    model = os.environ.get("OPENAI_MODEL", "policy")
    turn, reply = 0, ""
    while not args.max_turns or turn < args.max_turns:
        turn += 1
        message = client.chat.completions.create(model=model, messages=messages, tools=tools).choices[0].message
        reply = message.content or ""
        calls = message.tool_calls or []
        messages.append({"role": "assistant", "content": message.content,
                         **({"tool_calls": [c.model_dump() for c in calls]} if calls else {})})
        if not calls:
            break
        for c in calls:
            result = call_tool(c.function.name, c.function.arguments, args.command_timeout)
            messages.append({"role": "tool", "tool_call_id": c.id, "content": result})
    print(reply)
    return 0


if __name__ == "__main__":
    sys.exit(main())
