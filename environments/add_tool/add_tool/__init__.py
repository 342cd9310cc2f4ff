"""A taskset written against verifiers 0.4's v1 API (``import verifiers.v1 as vf``), nothing else.

The same file runs under upstream verifiers (0.4.x, its own ``vf-eval``) and here (our
``vf-eval``, ``vf-train`` and ``vf.load_environment("add-tool")``, through the v1 adapter):
it is the example docs/compat.md evaluates and trains. Each task asks for the sum of two
numbers too large to add reliably in one's head; an ``add`` tool of a Toolset does it. The
reward reads the reply as a user would: the last number in it must be the sum.
"""

from __future__ import annotations

import random
import re

import verifiers.v1 as vf
from add_tool.toolset import Arithmetic

__all__ = ["AddToolTaskset"]

SYSTEM_PROMPT = "Use the add tool to add the numbers, then answer with the sum alone."


class AddData(vf.TaskData):
    answer: int


class AddTask(vf.Task[AddData, vf.State]):
    @classmethod
    def toolsets(cls, config):
        return [Arithmetic(vf.ToolsetConfig())]

    @vf.reward(weight=1.0)
    async def correct(self, trace, task) -> float:
        """1 when the reply's last number is the sum (a user reads the answer at the end)."""
        numbers = re.findall(r"-?\d+", (trace.last_reply or "").replace(",", ""))
        return float(bool(numbers) and int(numbers[-1]) == task.answer)

    @vf.metric
    async def used_tool(self, trace) -> float:
        return float(bool(trace.tool_messages))


class AddToolConfig(vf.TasksetConfig):
    num_tasks: int = 200
    """How many problems ``load`` yields."""
    seed: int = 0
    """The problems' generator seed: a different seed, different problems."""
    max_operand: int = 999_999


class AddToolTaskset(vf.Taskset[AddTask, AddToolConfig]):
    def load(self):
        rng = random.Random(self.config.seed)
        for _ in range(self.config.num_tasks):
            a, b = rng.randint(1000, self.config.max_operand), rng.randint(1000, self.config.max_operand)
            data = AddData(prompt=f"What is {a} + {b}?", system_prompt=SYSTEM_PROMPT, answer=a + b)
            yield AddTask(data, self.config.task)
