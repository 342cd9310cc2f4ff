"""Real saved eval runs for the summary / viewer / report / export tests.

`build_run` evaluates a small ToolEnv against a ScriptedServer over real HTTP with
`run_eval` (the library behind ``vf-eval -s``), so the readers are tested on run
directories the real writer produces: tool calls and tool results, a malformed tool
call, a failing reward function, server errors that end rollouts, and model output
full of HTML and rich markup.

Test modules load this file by path, because tests/eval is not a package.
"""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

import verifiers as vf
from verifiers.eval.runner import EvalConfig, EvalResult, run_eval
from verifiers.testing import ScriptedReply, ScriptedServer, ScriptedToolCall, ServerScript

ENV_ID = "calc-tools"
MODEL = "scripted-model"
HOSTILE = '<script>window.__pwned = 1</script><img id="pwn" src="x" onerror="1"> [bold red]not markup[/]'

ROWS = [
    {"question": "What is 2+3?", "answer": "5"},
    {"question": "What is 1+1?", "answer": "2"},
    {"question": "What is 10+5?", "answer": "15"},
    {"question": "Repeat after me: hostile", "answer": "nothing"},
]


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


def correct(completion: vf.Messages, answer: str) -> float:
    """1.0 when the last assistant message ends with the answer."""
    texts = [m.get("content") or "" for m in completion if m.get("role") == "assistant"]
    return float(bool(texts) and texts[-1].strip().endswith(answer))


def used_tool(completion: vf.Messages) -> float:
    return float(any(m.get("role") == "tool" for m in completion))


def fragile(answer: str) -> float:
    """A reward function with a bug: fails on one example (a scoring error, not a rollout error)."""
    if answer == "2":
        raise KeyError("fragile cannot score answer 2")
    return 0.5


def script(fail_first: int = 0) -> ServerScript:
    def call(match: str, arguments: str) -> ScriptedReply:
        return ScriptedReply(
            match=match, turn=0, tool_calls=[ScriptedToolCall(name="add", arguments=arguments)]
        )

    return ServerScript(
        replies=[
            call(r"2\+3", '{"a": 2, "b": 3}'),
            call(r"1\+1", '{"a": 1, "b": 1}'),
            call(r"10\+5", '{"a": 10, "b": '),  # malformed JSON: goes back to the model as the tool message
            ScriptedReply(match="hostile", turn=0, content=HOSTILE),
            ScriptedReply(content="The answer is {last_message}"),
        ],
        fail_first=fail_first,
        fail_first_status=500,
    )


def make_env() -> vf.Environment:
    rubric = vf.Rubric(funcs=[correct, used_tool, fragile], weights=[1.0, 0.0, 0.0])
    return vf.ToolEnv(dataset=ROWS, tools=[add], rubric=rubric, max_turns=4)


def build_run(output_dir: Path, *, fail_first: int = 2) -> EvalResult:
    """Evaluate through `run_eval` (what ``vf-eval -s`` runs) and return its result.

    The run directory is ``output_dir/evals/<env>--<model>/<run-id>``. One rollout at
    a time, so the first ``fail_first`` rollouts are the ones the server fails.
    """
    with ScriptedServer(script(fail_first)) as server:
        config = EvalConfig(
            env_id=ENV_ID,
            model=MODEL,
            base_url=server.base_url,
            num_examples=-1,
            rollouts_per_example=3,
            max_concurrent=1,
            max_retries=0,
            save=True,
            output_dir=output_dir,
            show_progress=False,
        )
        out = run_eval(config, env=make_env(), console=Console(file=io.StringIO()))
    results = out.results
    kinds = {
        "errored": any(r.error is not None for r in results),
        "ok": any(r.error is None for r in results),
        "tool call": any(any(m.get("role") == "tool" for m in r.completion) for r in results),
        "scoring error": any(r.scoring_errors for r in results),
        "hostile": any(m.get("content") == HOSTILE for r in results for m in r.completion),
    }
    missing = [k for k, v in kinds.items() if not v]
    if missing or out.run_dir is None:
        raise RuntimeError(f"fixture run lacks {missing}; adjust the script")
    return out
