"""ToolRubric: tool-use metrics (weight 0 by default), one per tool plus the total."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from verifiers._helpers import callable_name
from verifiers.rubrics.rubric import Rubric


def _count_calls(completion: Any, name: str | None) -> float:
    if isinstance(completion, str):
        return 0.0
    n = 0
    for m in completion:
        if m.get("role") == "assistant":
            for tc in m.get("tool_calls") or []:
                if name is None or (tc.get("function") or {}).get("name") == name:
                    n += 1
    return float(n)


class ToolRubric(Rubric):
    def __init__(self, tools: Sequence[Callable[..., Any]] = (), weight: float = 0.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)

        def total_tool_calls(completion: Any) -> float:
            return _count_calls(completion, None)

        self.add_reward_func(total_tool_calls, weight)
        for tool in tools:
            tool_name = callable_name(tool)

            def count(completion: Any, _name: str = tool_name) -> float:
                return _count_calls(completion, _name)

            count.__name__ = f"{tool_name}_calls"
            self.add_reward_func(count, weight)
