"""A multi-turn environment: guess the number, with a final environment message.

``env_response`` gives feedback; ``is_completed`` is checked after the
environment's message too, so the game ends on its own verdict ("Correct!" or
"Out of guesses"), which the rubric sees.

    python examples/multiturn_game.py
"""

from __future__ import annotations

import asyncio
import re

import verifiers as vf
from verifiers.testing import ScriptedReply, ScriptedServer, ServerScript


class GuessEnv(vf.MultiTurnEnv):
    async def setup_state(self, state, **kwargs):
        state["target"] = int(state["answer"])
        state["solved"] = False
        return state

    async def is_completed(self, messages, state, **kwargs) -> bool:
        return state.get("done", False)

    async def env_response(self, messages, state, **kwargs):
        match = re.search(r"-?\d+", messages[-1].get("content") or "")
        guess = int(match.group()) if match else None
        remaining = self.max_turns - state["turn"]
        if guess == state["target"]:
            state["solved"] = state["done"] = True
            return [{"role": "user", "content": "Correct!"}], state
        if remaining <= 0:
            state["done"] = True
            return [{"role": "user", "content": f"Out of guesses. It was {state['target']}."}], state
        hint = "higher" if guess is None or guess < state["target"] else "lower"
        return [{"role": "user", "content": f"Go {hint}. {remaining} guesses left."}], state


def solved(state) -> float:
    return 1.0 if state["solved"] else 0.0


def load_environment() -> vf.Environment:
    rows = [{"question": "Guess my number between 1 and 10.", "answer": str(n)} for n in (3, 7, 9)]
    return GuessEnv(dataset=rows, max_turns=3, rubric=vf.Rubric(funcs=[solved]))


async def main() -> None:
    # The stand-in model guesses 3, then 7, then 9.
    script = ServerScript(replies=[ScriptedReply(turn=0, content="3"), ScriptedReply(turn=1, content="7"), ScriptedReply(content="9")])
    async with ScriptedServer(script) as server:
        client = vf.make_client(server.base_url)
        out = await load_environment().a_evaluate(client, "scripted")
        await client.close()
    for answer, completion, reward in zip(out.answer, out.completion, out.reward, strict=True):
        print(f"target {answer}: reward {reward}; last message: {completion[-1]['content']!r}")


if __name__ == "__main__":
    asyncio.run(main())
