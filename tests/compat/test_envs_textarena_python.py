"""PythonEnv, SandboxEnv and TextArenaEnv: one real episode each against a ScriptedServer."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import verifiers as vf
from verifiers.testing import ScriptedReply, ScriptedServer, ScriptedToolCall, ServerScript


def tool_reply(turn: int, name: str, **args: str) -> ScriptedReply:
    return ScriptedReply(turn=turn, tool_calls=[ScriptedToolCall(name=name, arguments=json.dumps(args))])


async def test_python_env_episode_keeps_variables_between_calls() -> None:
    script = ServerScript(
        replies=[
            tool_reply(0, "python", code="import os\nx = 6 * 7\nprint('pid', os.getpid() > 0)"),
            tool_reply(1, "python", code="x + 1"),
            tool_reply(2, "python", code="1/0"),
            ScriptedReply(content="The answer is 43."),
        ]
    )

    def used_repl(state) -> float:
        return float(state["python_env"]["execution_count"])

    env = vf.PythonEnv(
        dataset=[{"question": "compute", "answer": "43"}], max_turns=6, rubric=vf.Rubric(funcs=[used_repl])
    )
    assert [t["function"]["name"] for t in env.oai_tools] == ["python"]
    assert set(env.oai_tools[0]["function"]["parameters"]["properties"]) == {"code"}
    with ScriptedServer(script) as server:
        out = await env.a_evaluate(vf.make_client(server.base_url, max_retries=0), "scripted")
    completion = out.completion[0]
    tool_msgs = [m["content"] for m in completion if m["role"] == "tool"]
    assert tool_msgs[0] == "pid True"
    assert tool_msgs[1] == "Out[2]: 43"  # x survived from the first call
    assert "ZeroDivisionError: division by zero" in tool_msgs[2]
    assert completion[-1]["content"] == "The answer is 43."
    assert out.metrics["used_repl"] == [3.0]
    state = out.state[0]
    assert "sandbox_id" not in state and not env.active_sandboxes  # directory removed after the rollout


async def test_sandbox_env_bash_files_persist_within_rollout() -> None:
    script = ServerScript(
        replies=[
            tool_reply(0, "bash", command="echo hello > note.txt && echo written"),
            tool_reply(1, "bash", command="cat note.txt; echo oops >&2"),
            ScriptedReply(content="done"),
        ]
    )
    env = vf.SandboxEnv(dataset=[{"question": "go"}], max_turns=5)
    with ScriptedServer(script) as server:
        out = await env.a_evaluate(vf.make_client(server.base_url, max_retries=0), "scripted")
    tool_msgs = [m["content"] for m in out.completion[0] if m["role"] == "tool"]
    assert tool_msgs == ["written", "hello\nstderr:\noops"]
    assert not env.active_sandboxes


def test_textarena_env_errors_clearly_without_the_package() -> None:
    code = (
        "import sys; sys.modules['textarena'] = None\n"
        "import verifiers as vf\n"
        "try:\n    vf.TextArenaEnv(game='GuessTheNumber-v0')\n"
        "except vf.ConfigError as e:\n    print('ERR', e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=dict(os.environ)
    )
    assert out.returncode == 0, out.stderr
    assert "ERR TextArenaEnv needs the 'textarena' package" in out.stdout
    assert '.[textarena]"' in out.stdout  # the extra, for how verifiers was installed (here: a clone)


async def test_textarena_env_plays_a_real_game() -> None:
    pytest.importorskip("textarena")
    # Binary search over 1..20 with the game's own feedback; the script answers by turn.
    parser = vf.XMLParser(["think", "guess"], answer_field="guess")

    def won(state) -> float:
        return 1.0 if state.get("is_completed") else 0.0

    env = vf.TextArenaEnv(
        game="GuessTheNumber-v0",
        num_train_examples=1,
        parser=parser,
        rubric=vf.Rubric(funcs=[won]),
        feedback_fn=lambda obs: obs.strip().splitlines()[-1],
        max_turns=25,
        seed=0,
    )
    row = env.dataset.rows[0]
    assert "Guess The Number" in row["prompt"][-1]["content"] and row["info"] == {"seed": 0}

    # The game's secret for seed 0, read the same way the environment starts its game.
    game = env._start_game({"answer": "", "info": row["info"]})
    secret = game.state.game_state["game_number"]
    guesses = [n for n in range(1, 21) if n != secret] + [secret]
    replies = [
        ScriptedReply(turn=i, content=f"<think>try</think>\n<guess>[{g}]</guess>")
        for i, g in enumerate(guesses[-3:])
    ]
    with ScriptedServer(ServerScript(replies=replies)) as server:
        out = await env.a_evaluate(vf.make_client(server.base_url, max_retries=0), "scripted")
    completion = out.completion[0]
    feedback = [m["content"] for m in completion if m["role"] == "user"]
    assert len(feedback) == 3 and out.stop_reason == ["completed"]
    assert "[GAME]" in feedback[0]
    assert out.metrics["won"] == [1.0]
