"""An agent program that answers, then checks its answer: two chat calls with the OpenAI SDK.

It reads the problem from ``VF_TASK`` (or ``TASK.md``), asks the model to solve it, sends the
reply back with a request to check the work and give only the final answer, and prints that
last reply. No tools: it runs on models whose chat template has no tool support (SmolLM2's).
Run it by hand against any OpenAI-compatible server:

    OPENAI_BASE_URL=http://127.0.0.1:8000/v1 OPENAI_API_KEY=x VF_TASK="What is 3 + 4?" \\
        python check_agent.py

Under `vf.AgentEnv` (this environment) the gateway sets those variables per rollout and records
both calls with their token ids; the reward reads the printed answer.
"""

from __future__ import annotations

import os
from pathlib import Path

from openai import OpenAI

SYSTEM = ("Solve the arithmetic problem. Multiplication comes before addition and subtraction. "
          "Give the final answer as an integer inside \\boxed{}, e.g. \\boxed{42}.")
CHECK = "Check your work. Reply with only the final answer, as \\boxed{N}."


def main() -> None:
    task = os.environ.get("VF_TASK") or Path("TASK.md").read_text().strip()
    client = OpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY from the environment
    model = os.environ.get("OPENAI_MODEL", "policy")
    messages: list[dict] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}]
    reply = client.chat.completions.create(model=model, messages=messages).choices[0].message
    if os.environ.get("AGENT_CHECK", "1") == "1":
        messages += [reply.model_dump(exclude_none=True), {"role": "user", "content": CHECK}]
        reply = client.chat.completions.create(model=model, messages=messages).choices[0].message
    print(reply.content or "")


if __name__ == "__main__":
    main()
