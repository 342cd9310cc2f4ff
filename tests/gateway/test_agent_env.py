"""AgentEnv: real agent programs as subprocesses, through the gateway, against a scripted server."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import verifiers as vf
from verifiers.testing import ScriptedReply, ScriptedServer, ScriptedToolCall, ServerScript

HERE = Path(__file__).parent
CHAT_ONCE = [sys.executable, str(HERE / "programs" / "chat_once.py")]
LOOKUP_AGENT = [sys.executable, str(HERE.parents[1] / "environments" / "agent_lookup" / "agent_lookup" / "lookup_agent.py")]
ROWS = [{"question": "look up A", "answer": "42", "info": {"table": {"A": "42", "B": "17"}, "key": "A"}}]


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs; a zombie, or a process reaped between the two looks, counts as gone."""
    try:
        os.kill(pid, 0)  # signal 0: an existence check, nothing is sent
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (ProcessLookupError, FileNotFoundError):
        return False


def _env(command: list[str], funcs: list[Any] | None = None, **kw: Any) -> vf.AgentEnv:
    rubric = vf.Rubric(funcs=funcs or [lambda completion, **_: 0.0])
    return vf.AgentEnv(command=command, dataset=ROWS, rubric=rubric, **kw)


async def test_lookup_agent_learns_nothing_but_everything_is_recorded_and_scored() -> None:
    script = ServerScript(replies=[
        ScriptedReply(turn=0, content="", tool_calls=[ScriptedToolCall(name="lookup", arguments='{"key": "A"}')]),
        ScriptedReply(content="42"),
    ])
    seen: dict[str, Any] = {}

    def answered(completion: Any, state: dict[str, Any], prompt: Any, **_: Any) -> float:
        seen.update(prompt=prompt, completion=completion, agent=dict(state["agent"]), workdir=state["workdir"],
                    task_md=(Path(state["workdir"]) / "TASK.md").read_text())
        return float(state["agent"]["stdout"].strip() == "42")

    with ScriptedServer(script) as srv:
        env = _env(LOOKUP_AGENT, [answered])
        out = await env.a_generate(ROWS, vf.make_client(base_url=srv.base_url), "policy")
    r = out.results[0]
    assert r.error is None and r.reward == 1.0 and r.stop_reason == "completed"
    assert seen["prompt"] == [{"role": "user", "content": "look up A"}] and seen["task_md"] == "look up A\n"
    assert [m["role"] for m in seen["completion"]] == ["assistant", "tool", "assistant"]
    assert seen["completion"][1]["content"] == "42" and seen["completion"][2]["content"] == "42"
    assert seen["agent"]["exit_code"] == 0 and seen["agent"]["num_calls"] == 2 and not seen["agent"]["timed_out"]
    assert not Path(seen["workdir"]).exists()  # removed once scoring was over
    # recorded ids = the server's ids for what it was sent (one id per character)
    from verifiers.testing.script import render_chat

    assert len(r.tokens) == 2 and r.turns == 2
    for sent, turn in zip(srv.requests, r.tokens, strict=True):
        assert turn.prompt_ids == [ord(c) for c in render_chat(sent["messages"])[0]]
    assert r.tokens[1].completion_ids == [ord(c) for c in "42"]
    assert r.token_sequence().prefix_consistent  # a linear history: one training row


async def test_the_program_gets_a_minimal_environment_and_grading_never_sees_the_gateway() -> None:
    os.environ["VF_TEST_SECRET_TOKEN"] = "do-not-leak"
    grading: dict[str, Any] = {}

    def grade(state: dict[str, Any], **_: Any) -> float:
        out = subprocess.run([sys.executable, "-c", "import json, os; print(json.dumps(dict(os.environ)))"],
                             capture_output=True, text=True, cwd=state["workdir"], check=True)
        grading.update(json.loads(out.stdout))
        return 1.0

    try:
        with ScriptedServer(ServerScript()) as srv:
            env = _env([*CHAT_ONCE, "env"], [grade], env={"AGENT_FLAG": "1"})
            out = await env.a_generate(ROWS, vf.make_client(base_url=srv.base_url), "policy")
    finally:
        del os.environ["VF_TEST_SECRET_TOKEN"]
    r = out.results[0]
    assert r.error is None, r.error
    seen = json.loads(r.state["agent"]["stdout"].splitlines()[0])
    expected = {"PATH", "LANG", "HOME", "TMPDIR", "PYTHONUNBUFFERED", "OPENAI_BASE_URL", "OPENAI_API_BASE",
                "OPENAI_API_KEY", "OPENAI_MODEL", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "VF_TASK", "VF_PROMPT",
                "VF_INFO", "AGENT_FLAG"}
    assert set(seen) - {"LC_CTYPE"} == expected  # (LC_CTYPE: the interpreter's own locale coercion)
    # The Anthropic SDKs append /v1/messages to their base URL: the same session, the same secret.
    assert seen["ANTHROPIC_BASE_URL"] + "/v1" == seen["OPENAI_BASE_URL"]
    assert seen["ANTHROPIC_API_KEY"] == seen["OPENAI_API_KEY"]
    assert seen["HOME"] == r.state["workdir"] and seen["VF_TASK"] == "look up A" and seen["OPENAI_MODEL"] == "policy"
    assert json.loads(seen["VF_INFO"]) == ROWS[0]["info"]
    assert json.loads(seen["VF_PROMPT"]) == [{"role": "user", "content": "look up A"}]
    assert "VF_TEST_SECRET_TOKEN" not in seen
    assert grading and seen["OPENAI_API_KEY"] not in grading.values()
    assert not any(seen["ANTHROPIC_BASE_URL"] in v for v in grading.values())
    status = subprocess.run(
        [sys.executable, "-c", "import sys, urllib.request, urllib.error\n"
         "req = urllib.request.Request(sys.argv[1] + '/chat/completions', data=b'{}', "
         "headers={'Authorization': 'Bearer ' + sys.argv[2]})\n"
         "try:\n    urllib.request.urlopen(req)\nexcept urllib.error.HTTPError as e:\n    print(e.code)",
         seen["OPENAI_BASE_URL"], seen["OPENAI_API_KEY"]], capture_output=True, text=True, check=True)
    assert status.stdout.strip() == "409"  # the session closed with the rollout


async def test_failures_are_data_with_typed_errors() -> None:
    with ScriptedServer(ServerScript()) as srv:
        client = vf.make_client(base_url=srv.base_url)
        results = {}
        for mode in ("crash", "nocall", "crash_after"):
            out = await _env([*CHAT_ONCE, mode]).a_generate(ROWS, client, "policy")
            results[mode] = out.results[0]
        missing = await _env(["/nonexistent/agent-binary"]).a_generate(ROWS, client, "policy")
    crash, nocall, after = results["crash"], results["nocall"], results["crash_after"]
    assert crash.error and crash.error.type == "AgentCrashedError" and "code 3" in crash.error.message
    assert "boom: cannot go on" in crash.error.message and crash.stop_reason == "error"
    assert nocall.error and nocall.error.type == "AgentNoCallsError"
    assert after.error and after.error.type == "AgentCrashedError" and "after 1 model call" in after.error.message
    assert len(after.tokens) == 1  # what the program did before failing is kept
    err = missing.results[0].error
    assert err and err.type == "AgentError" and "could not start" in err.message


async def test_timeout_ends_the_whole_process_tree() -> None:
    with ScriptedServer(ServerScript()) as srv:
        env = _env([*CHAT_ONCE, "hang"], timeout_s=3.0)
        holder: dict[str, int] = {}

        def grab(state: dict[str, Any], **_: Any) -> float:
            holder["child"] = int((Path(state["workdir"]) / "child.pid").read_text().split()[0])
            holder["pid"] = state["agent"]["run"].pid
            return 0.0

        env.rubric = vf.Rubric(funcs=[grab])
        out = await env.a_generate(ROWS, vf.make_client(base_url=srv.base_url), "policy")
    r = out.results[0]
    assert r.stop_reason == "timeout" and r.is_truncated and r.error is None
    assert r.state["agent"]["timed_out"] and len(r.tokens) == 1
    assert not _alive(holder["pid"]) and not _alive(holder["child"])


async def test_budget_stop_is_a_stop_reason_not_a_crash() -> None:
    with ScriptedServer(ServerScript()) as srv:
        env = _env([*CHAT_ONCE, "calls", "5"], max_calls=2)
        out = await env.a_generate(ROWS, vf.make_client(base_url=srv.base_url), "policy")
    r = out.results[0]
    assert r.stop_reason == "max_turns" and r.error is None and len(r.tokens) == 2
    assert r.state["agent"]["exit_code"] != 0  # the program died on the 400, as programs do


def test_bad_configuration_is_refused_with_the_fix() -> None:
    import pytest

    with pytest.raises(vf.ConfigError, match="may not set OPENAI_API_KEY"):
        vf.AgentEnv(command=["x"], dataset=ROWS, env={"OPENAI_API_KEY": "k"})
    with pytest.raises(vf.ConfigError, match="may not set ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL"):
        vf.AgentEnv(command=["x"], dataset=ROWS, env={"ANTHROPIC_BASE_URL": "u", "ANTHROPIC_API_KEY": "k"})
    with pytest.raises(vf.ConfigError, match="needs a command"):
        vf.AgentEnv(command=[], dataset=ROWS)
    with pytest.raises(vf.ConfigError, match="outside the working directory"):
        env = vf.AgentEnv(command=["x"], dataset=ROWS, files={"../escape.txt": "x"})
        env._workdir([{"role": "user", "content": "t"}])


async def test_cancelling_the_run_ends_the_program_and_its_children(tmp_path: Path) -> None:
    import asyncio

    with ScriptedServer(ServerScript()) as srv:
        env = _env([*CHAT_ONCE, "hang"], env={"PID_DIR": str(tmp_path)}, timeout_s=600)
        task = asyncio.ensure_future(env.a_generate(ROWS, vf.make_client(base_url=srv.base_url), "policy"))
        pid_file = tmp_path / "child.pid"
        for _ in range(300):
            if pid_file.exists() and pid_file.read_text().strip():
                break
            await asyncio.sleep(0.05)
        child_s, program_s, workdir = pid_file.read_text().split()
        child, program = int(child_s), int(program_s)
        assert _alive(child) and _alive(program)
        task.cancel()  # what Ctrl-C does to a run
        with contextlib.suppress(asyncio.CancelledError):
            await task
    for _ in range(100):
        if not (_alive(child) or _alive(program)):
            break
        await asyncio.sleep(0.05)
    assert not _alive(child) and not _alive(program)
    assert not Path(workdir).exists()  # the working directory went with the cancelled rollout


def test_a_tokenizer_named_by_its_model_is_loaded_for_token_in(tmp_path: Path) -> None:
    """``AgentEnv(tokenizer="<model>")``, what ``vf-eval -a '{"tokenizer": ...}'`` can pass: the
    model's tokenizer is loaded (as vf-serve resolves the model) and follow-ups go token-in."""
    import pytest

    pytest.importorskip("transformers")
    from verifiers.gateway import TokenIn
    from verifiers.models.tiny import save_tiny_model

    model_dir = save_tiny_model(tmp_path / "tiny")
    env = vf.AgentEnv(command=[sys.executable, "-c", "pass"], dataset=[{"question": "q", "answer": ""}],
                      rubric=vf.Rubric(funcs=[lambda **_: 0.0]), tokenizer=str(model_dir))
    assert isinstance(env.token_prompt, TokenIn)
    assert env.token_prompt.tail.closing == "<|im_end|>\n"  # the tiny model's ChatML template
