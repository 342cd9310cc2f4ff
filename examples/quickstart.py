"""Quickstart: evaluate an environment end to end, on this machine, with no model download.

Starts the scripted OpenAI-compatible server on 127.0.0.1 (a stand-in model that
answers by rule), builds a reverse-text style environment in a few lines, runs
concurrent rollouts through the real HTTP client, scores them, and prints a
summary. Replace ``base_url``/``model`` with a vLLM or hosted endpoint to
evaluate a real model.

    python examples/quickstart.py
"""

from __future__ import annotations

import asyncio
import random
import statistics

import verifiers as vf
from verifiers.testing import ScriptedReply, ScriptedServer, ServerScript

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima", "mike"]


def build_env(n: int = 40, seed: int = 0) -> vf.Environment:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        text = " ".join(rng.sample(WORDS, 3))
        rows.append({"question": text, "answer": text[::-1]})
    parser = vf.XMLParser(["think", "answer"], answer_field="answer")

    def reversed_exactly(completion, answer, parser) -> float:
        return 1.0 if (parser.parse_answer(completion) or "") == answer else 0.0

    rubric = vf.Rubric(funcs=[reversed_exactly, parser.get_format_reward_func()], weights=[1.0, 0.2], parser=parser)
    return vf.SingleTurnEnv(
        dataset=rows,
        system_prompt="Reverse the text character by character. Answer as <think>...</think><answer>...</answer>.",
        parser=parser,
        rubric=rubric,
    )


async def main() -> None:
    # The stand-in model reverses the user's text for two prompts out of three.
    script = ServerScript(
        latency_s=0.05,
        replies=[
            ScriptedReply(match=r"^(alpha|bravo|charlie|delta)", content="<think>hmm</think><answer>no idea</answer>"),
            ScriptedReply(content="<think>reverse it</think>\n<answer>{reversed_last_user}</answer>"),
        ],
    )
    async with ScriptedServer(script) as server:
        client = vf.make_client(server.base_url)
        env = build_env()
        out = await env.a_evaluate(client, "scripted", num_examples=40, rollouts_per_example=3, max_concurrent=32)
        await client.close()
    print(f"rollouts: {len(out.reward)}  errors: {sum(e is not None for e in out.error)}")
    print(f"reward: {statistics.mean(out.reward):.3f} ± {statistics.pstdev(out.reward):.3f}")
    for name, values in out.metrics.items():
        print(f"  {name}: {statistics.mean(values):.3f}")
    print("example completion:", out.completion[0][-1]["content"])


if __name__ == "__main__":
    asyncio.run(main())
