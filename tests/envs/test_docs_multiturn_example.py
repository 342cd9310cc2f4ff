"""The multi-turn example of docs/environments.md, run as written: a right last guess scores 1.0."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import verifiers as vf
from verifiers.testing import ScriptedReply, ScriptedServer, ServerScript

DOC = Path(__file__).parents[2] / "docs" / "environments.md"


def _example() -> dict[str, Any]:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    (code,) = [b for b in blocks if "class GuessEnv" in b]
    namespace: dict[str, Any] = {}
    exec(compile(code, str(DOC), "exec"), namespace)
    return namespace


def _run(env: vf.Environment, *guesses: str) -> vf.GenerateOutputs:
    replies = [ScriptedReply(turn=i, content=g) for i, g in enumerate(guesses)]
    with ScriptedServer(ServerScript(replies=replies)) as srv:
        return env.evaluate(vf.make_client(srv.base_url, max_retries=0), "m", num_examples=1,
                            rollouts_per_example=1)


def test_a_right_guess_on_the_last_allowed_turn_scores_one() -> None:
    env = _example()["env"]
    assert env.max_turns == 2
    out = _run(env, "3", "7")
    r = out.results[0]
    assert r.reward == 1.0 and r.turns == 2
    assert [m["role"] for m in r.completion] == ["assistant", "user", "assistant"]  # no reply to the last turn


def test_wrong_guesses_score_zero_and_a_right_first_guess_ends_the_game() -> None:
    env = _example()["env"]
    assert _run(env, "1", "2").results[0].reward == 0.0
    first = _run(env, "7").results[0]
    assert first.reward == 1.0 and first.turns == 1 and first.stop_reason == "completed"
