"""agent-lookup's reward and metrics, read from what the program did (never from driving it).

``correct_answer`` (the reward) reads the program's printed answer, ``state["agent"]["stdout"]``:
the program, not the model's last message, decides what the episode answered. The metrics
read the completion AgentEnv rebuilt from the recorded calls (the model's turns and the tool
results the program sent back) and say where an episode went wrong.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["correct_answer", "model_calls", "right_key_called", "tool_call_ran"]


def _messages(completion: Any, role: str) -> list[dict[str, Any]]:
    if isinstance(completion, str):
        return []
    return [m for m in completion if isinstance(m, dict) and m.get("role") == role]


def _called_keys(completion: Any) -> list[Any]:
    """The ``key`` argument of every ``lookup`` call whose arguments are a JSON object, in order."""
    keys = []
    for m in _messages(completion, "assistant"):
        for tc in m.get("tool_calls") or []:
            fn = tc.get("function") or {}
            raw = fn.get("arguments")
            try:
                args = json.loads(raw) if isinstance(raw, str) else raw
            except json.JSONDecodeError:
                continue
            if fn.get("name") == "lookup" and isinstance(args, dict):
                keys.append(args.get("key"))
    return keys


def correct_answer(state: dict[str, Any], answer: str) -> float:
    """1.0 when the program printed exactly the asked key's value (and nothing else)."""
    agent = state.get("agent") or {}
    return float(str(agent.get("stdout") or "").strip() == answer)


def right_key_called(completion: Any, info: dict[str, Any]) -> float:
    """1.0 when the model called ``lookup`` with the asked key."""
    return float(info.get("key") in _called_keys(completion))


def tool_call_ran(completion: Any) -> float:
    """1.0 when the program sent back at least one tool result and none was an error."""
    results = [str(m.get("content") or "") for m in _messages(completion, "tool")]
    return float(bool(results) and not any(r.startswith("error") for r in results))


def model_calls(state: dict[str, Any]) -> float:
    """How many model calls the program made (a successful episode makes 2)."""
    agent = state.get("agent") or {}
    return float(agent.get("num_calls") or 0)
