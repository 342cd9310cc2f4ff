"""MCPToolEnv against real stdio MCP servers: the in-repo toy server (tests/envs/mcp_data/toy_server.py,
written with the mcp SDK) and PyPI's mcp-server-calculator in a venv of its own.

Model replies are scripted (ScriptedServer over HTTP, or ScriptedClient where a reply must
act mid-rollout); every tool result comes from a real server process, and "no process left"
is checked by the pid each server writes to ``$TOY_PIDFILE``.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import subprocess
import sys
import time
from importlib.util import find_spec
from pathlib import Path

import pytest

import verifiers as vf
from verifiers.rollout.error_report import RolloutErrorsWarning
from verifiers.testing import ScriptedClient, ScriptedReply, ScriptedServer, ScriptedToolCall, ServerScript
from verifiers.tools.mcp_client import MCPTool, exposed_names, result_text, tool_from_listing

# Tests that start servers need the mcp extra; the two about a missing extra and imports do not.
needs_mcp = pytest.mark.skipif(find_spec("mcp") is None, reason="the mcp extra is not installed (pip install -e '.[mcp]')")

ROOT = Path(__file__).resolve().parents[2]
TOY = str(Path(__file__).with_name("mcp_data") / "toy_server.py")
DATA = [{"question": "What is 2+3?", "answer": "5"}]


def toy(name: str = "toy", pidfile: Path | None = None, **env: str) -> dict:
    extra = {"TOY_PIDFILE": str(pidfile)} if pidfile else {}
    return {"name": name, "command": sys.executable, "args": [TOY, "--name", name], "env": {**extra, **env}}


def pids(pidfile: Path) -> list[int]:
    return [int(line) for line in pidfile.read_text().split()] if pidfile.exists() else []


def alive(pid: int) -> bool:
    """Is the process there and not a zombie? (Linux: /proc; elsewhere: signal 0.)"""
    stat = Path(f"/proc/{pid}/stat")
    if Path("/proc/self/stat").exists():
        try:
            return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except (FileNotFoundError, ProcessLookupError):
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def calls(*pairs: tuple[str, dict | str], turn: int | None = None) -> ScriptedReply:
    return ScriptedReply(
        turn=turn,
        tool_calls=[
            ScriptedToolCall(name=n, arguments=a if isinstance(a, str) else json.dumps(a)) for n, a in pairs
        ],
    )


def turns(fn_by_turn: dict[int, object], last: object = "done"):
    """A ScriptedClient reply function keyed by the number of assistant messages so far."""

    def reply(messages):
        n = sum(1 for m in messages if m.get("role") == "assistant")
        value = fn_by_turn.get(n, last)
        return value() if callable(value) else value

    return reply


def tool_call(*pairs: tuple[str, dict | str]) -> dict:
    return {
        "tool_calls": [
            {"name": n, "arguments": a if isinstance(a, str) else json.dumps(a)} for n, a in pairs
        ]
    }


# -- one server over real HTTP: schemas, results, errors, environment ------------------------------


@needs_mcp
async def test_tools_results_and_errors(server: ScriptedServer, client, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("VF_TEST_NOT_FOR_SERVERS", "leaked")  # ours, not given: the server must not see it
    server.set_script(
        ServerScript(
            replies=[
                calls(
                    ("add", {"a": 2, "b": 3}),
                    ("fail", {"reason": "because"}),
                    ("point", {"x": 4}),
                    ("nope", {}),
                    ("add", '{"a": 2, "b": '),
                    ("add", {"a": "two"}),
                    ("getenv", {"name": "TOY_TOKEN"}),
                    ("getenv", {"name": "VF_TEST_NOT_FOR_SERVERS"}),
                    ("getenv", {"name": "PATH"}),
                    ("reject", {}),
                    ("add", {"a": 1, "b": 1}),
                    turn=0,
                ),
                ScriptedReply(content="The answer is 5"),
            ]
        )
    )
    pidfile = tmp_path / "pids"
    env = vf.MCPToolEnv(mcp_servers=[toy(pidfile=pidfile, TOY_TOKEN="t0k3n")], dataset=DATA)
    async with env:
        out = await env.a_evaluate(client, "m")
        r = out.results[0]
        assert r.error is None and r.stop_reason == "completed"

        # The schemas the model got: the server's tools with their input schemas, unprefixed.
        tools = {t["function"]["name"]: t["function"] for t in server.requests[0]["tools"]}
        assert sorted(tools) == ["add", "counter", "crash", "fail", "getenv", "point", "reject", "sleep"]
        assert tools["add"]["description"] == "Add two integers."
        assert tools["add"]["parameters"]["properties"]["a"]["type"] == "integer"
        assert tools["add"]["parameters"]["required"] == ["a", "b"]
        assert all(t["type"] == "function" for t in server.requests[0]["tools"])

        ids = [tc["id"] for tc in r.completion[0]["tool_calls"]]
        msgs = r.completion[1:-1]
        assert [m["role"] for m in msgs] == ["tool"] * 11
        assert [m["tool_call_id"] for m in msgs] == ids
        content = [m["content"] for m in msgs]
        assert content[0] == "5"
        assert content[1] == "Error: Tool 'fail' failed: Error executing tool fail"  # the server's isError text
        assert json.loads(content[2]) == {"x": 4, "y": 8}  # structured content, no text part
        assert content[3] == "Error: Unknown tool 'nope'. Available tools: add, counter, crash, fail, getenv, point, reject, sleep."
        assert content[4].startswith("Error: Arguments for tool 'add' are not valid JSON")
        assert content[5].startswith("Error: Tool 'add' failed: ") and "validation error" in content[5]
        assert content[6:8] == ["t0k3n", "<unset>"]  # only the SDK's allow-list plus what we give
        assert content[8] == os.environ["PATH"]
        assert content[9] == "Error: Tool 'reject' failed: MCP error -32602: reject refuses"  # a raised MCP error
        assert content[10] == "2"  # the connection survives it
        assert r.completion[-1] == {"role": "assistant", "content": "The answer is 5"}
        # The model saw every tool message.
        assert server.requests[-1]["messages"][-11:] == msgs
        assert [e.type for e in r.state["tool_errors"]] == [
            "ToolExecutionError", "ToolNotFoundError", "ToolArgumentsError", "ToolExecutionError",
            "ToolExecutionError",
        ]
        assert "_mcp_servers" not in r.state
        (pid,) = pids(pidfile)
        assert alive(pid)
    assert not alive(pid), "leaving `async with env` must stop the server"


GROWING = str(Path(__file__).with_name("mcp_data") / "growing_server.py")


@needs_mcp
@pytest.mark.parametrize("per_rollout", [False, True])
async def test_tools_the_server_adds_and_removes_while_running_are_offered_from_the_next_turn(
        server: ScriptedServer, client, per_rollout: bool) -> None:
    """The server sends notifications/tools/list_changed after grow/prune: the next request offers the
    new list, and a call to the new tool reaches it (before the refresh: "Unknown tool", not offered)."""
    server.set_script(ServerScript(replies=[
        calls(("grow", {"name": "hello"}), turn=0),
        calls(("hello", {}), ("prune", {"name": "hello"}), turn=1),
        calls(("hello", {}), turn=2),
        ScriptedReply(content="done"),
    ]))
    env = vf.MCPToolEnv(mcp_servers=[{"name": "growing", "command": sys.executable, "args": [GROWING]}],
                        dataset=DATA, per_rollout=per_rollout)
    async with env:
        out = await env.a_evaluate(client, "m")
    r = out.results[0]
    assert r.error is None and r.stop_reason == "completed", r.error
    offered = [sorted(t["function"]["name"] for t in req["tools"]) for req in server.requests]
    assert offered == [["grow", "prune"], ["grow", "hello", "prune"], ["grow", "prune"], ["grow", "prune"]]
    assert [m["content"] for m in r.completion if m["role"] == "tool"] == [
        "added hello", "hello is here", "removed hello", "Error: Unknown tool 'hello'. Available tools: grow, prune."]
    hello = next(t["function"] for t in server.requests[1]["tools"] if t["function"]["name"] == "hello")
    assert hello["description"] == "hello: added at runtime" and hello["parameters"]["type"] == "object"


def test_results_and_tools_read_in_both_sdk_spellings() -> None:
    """mcp 1.x objects use camelCase attributes (inputSchema, isError, structuredContent), 2.x snake_case."""
    v1 = {"content": [], "structuredContent": {"x": 1}, "isError": False}
    v2 = {"content": [], "structured_content": {"x": 1}, "is_error": False}
    assert result_text(v1) == result_text(v2) == ('{"x": 1}', False)
    parts = [{"type": "text", "text": "a"}, {"type": "image", "data": "..."}, {"type": "text", "text": "b"}]
    assert result_text({"content": parts, "isError": True}) == ("a\n[image content]\nb", True)
    assert result_text({"content": [{"type": "text", "text": "t"}], "structured_content": {"x": 1}}) == ("t", False)
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    for tool in ({"name": "t", "description": "d", "inputSchema": schema}, {"name": "t", "input_schema": schema}):
        assert tool_from_listing("s", tool).openai_schema("s_t")["function"]["parameters"] == schema


# -- two servers with the same tools: prefixes only on a clash ------------------------------------


def _tool(server: str, name: str) -> MCPTool:
    return MCPTool(server=server, name=name, description="", input_schema={"type": "object"})


def test_exposed_names_prefix_only_clashes() -> None:
    tools = [_tool("a", "add"), _tool("a", "sub"), _tool("b", "add"), _tool("b", "mul"), _tool("b", "echo")]
    names = exposed_names(tools, taken={"echo"})  # "echo" is a Python tool's name
    assert list(names) == ["a_add", "sub", "b_add", "mul", "b_echo"]
    assert names["b_add"].server == "b" and names["b_add"].name == "add"
    with pytest.raises(vf.ConfigError, match="rename the server"):
        exposed_names([_tool("a", "x"), _tool("a", "x")])


@needs_mcp
async def test_name_clash_between_servers_gets_prefixes() -> None:
    def shout(text: str) -> str:
        """Upper-case a text.

        Args:
            text: What to shout.
        """
        return text.upper()

    client = ScriptedClient(
        turns({0: tool_call(("alpha_counter", {}), ("alpha_counter", {}), ("beta_counter", {}),
                            ("beta_add", {"a": 1, "b": 1}), ("shout", {"text": "hi"}), ("add", {"a": 1, "b": 1}))})
    )
    with vf.MCPToolEnv(mcp_servers=[toy("alpha"), toy("beta")], tools=[shout], dataset=DATA) as env:
        out = await env.a_evaluate(client, "m")
    r = out.results[0]
    names = [t["function"]["name"] for t in client.calls[0].tools]
    assert names[0] == "shout"
    assert sorted(names[1:]) == sorted(f"{s}_{t}" for s in ("alpha", "beta")
                                       for t in ("add", "counter", "crash", "fail", "getenv", "point", "reject", "sleep"))
    # Each prefixed name reaches its own server: alpha counts 1, 2, beta starts at 1.
    assert [m["content"] for m in r.completion[1:7]] == ["1", "2", "1", "2", "HI", r.completion[6]["content"]]
    assert r.completion[6]["content"].startswith("Error: Unknown tool 'add'. Available tools: alpha_add,")


@needs_mcp
async def test_slow_tool_times_out_and_the_server_goes_on() -> None:
    client = ScriptedClient(turns({0: tool_call(("sleep", {"seconds": 30})), 1: tool_call(("add", {"a": 1, "b": 2}))}))
    with vf.MCPToolEnv(mcp_servers=[toy()], dataset=DATA, tool_timeout_s=0.5) as env:
        t0 = time.perf_counter()
        out = await env.a_evaluate(client, "m")
        assert time.perf_counter() - t0 < 15
    r = out.results[0]
    assert [m["content"] for m in r.completion if m["role"] == "tool"] == [
        "Error: Tool 'sleep' timed out after 0.5 s.", "3",
    ]
    assert r.state["tool_errors"][0].type == "ToolTimeoutError"


# -- per_rollout: fresh servers per rollout, stopped in cleanup_state ----------------------------


COUNTER_TWICE_THEN_ONCE = {0: tool_call(("counter", {}), ("counter", {})), 1: tool_call(("counter", {}))}


@needs_mcp
async def test_per_rollout_servers_are_isolated_and_stopped(tmp_path) -> None:
    pidfile = tmp_path / "pids"
    env = vf.MCPToolEnv(mcp_servers=[toy(pidfile=pidfile)], per_rollout=True, dataset=DATA * 3)
    out = await env.a_evaluate(ScriptedClient(turns(COUNTER_TWICE_THEN_ONCE)), "m", max_concurrent=3)
    for r in out.results:
        assert r.error is None
        assert [m["content"] for m in r.completion if m["role"] == "tool"] == ["1", "2", "3"]
    started = pids(pidfile)
    assert len(set(started)) == 3  # one server per rollout...
    assert not any(alive(p) for p in started)  # ...each stopped by cleanup_state, before env.close()
    env.close()


@needs_mcp
async def test_shared_server_keeps_state_across_rollouts(tmp_path) -> None:
    pidfile = tmp_path / "pids"
    with vf.MCPToolEnv(mcp_servers=[toy(pidfile=pidfile)], dataset=DATA * 2) as env:
        out = await env.a_evaluate(ScriptedClient(turns(COUNTER_TWICE_THEN_ONCE)), "m", max_concurrent=2)
        counts = sorted(int(m["content"]) for r in out.results for m in r.completion if m["role"] == "tool")
        assert counts == [1, 2, 3, 4, 5, 6]  # one process served both rollouts
        (pid,) = pids(pidfile)
    assert not alive(pid)


# -- a server killed mid-rollout ----------------------------------------------------------------


@needs_mcp
async def test_server_killed_mid_rollout_becomes_error_then_restarts(tmp_path) -> None:
    pidfile = tmp_path / "pids"

    def kill_then_call() -> dict:
        (pid,) = pids(pidfile)
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        return tool_call(("add", {"a": 1, "b": 1}))

    script = {0: tool_call(("add", {"a": 2, "b": 3})), 1: kill_then_call, 2: tool_call(("counter", {}))}
    env = vf.MCPToolEnv(mcp_servers=[toy(pidfile=pidfile)], dataset=DATA, tool_timeout_s=60)
    try:
        t0 = time.perf_counter()
        out = await env.a_evaluate(ScriptedClient(turns(script)), "m")
        assert time.perf_counter() - t0 < 30  # no hang on the dead pipe (the tool timeout is 60 s)
        r = out.results[0]
        assert r.error is None and r.stop_reason == "completed"
        tool_msgs = [m["content"] for m in r.completion if m["role"] == "tool"]
        assert tool_msgs[0] == "5"
        assert tool_msgs[1] == "Error: MCP server 'toy' did not answer the call to 'add': its process has ended."
        assert tool_msgs[2].startswith("Error: MCP server 'toy' is not running (its process ended")
        assert [e.type for e in r.state["tool_errors"]] == ["MCPServerDown", "MCPServerDown"]

        # The next rollout gets a new server process.
        out = await env.a_evaluate(ScriptedClient(turns({0: tool_call(("counter", {}))})), "m")
        assert [m["content"] for m in out.results[0].completion if m["role"] == "tool"] == ["1"]
        first, second = pids(pidfile)
        assert first != second and alive(second)
    finally:
        env.close()
    assert not alive(second)


@needs_mcp
async def test_server_that_cannot_start_again_is_reported_gone(tmp_path) -> None:
    pidfile = tmp_path / "pids"
    gate = tmp_path / "may-start"
    gate.write_text("")
    # A wrapper that refuses to start once the gate file is gone.
    wrapper = f"import os, runpy, sys; os.path.exists({str(gate)!r}) or sys.exit('no more starts'); " \
              f"sys.argv = [{TOY!r}]; runpy.run_path({TOY!r}, run_name='__main__')"
    cfg = {"name": "toy", "command": sys.executable, "args": ["-c", wrapper], "env": {"TOY_PIDFILE": str(pidfile)}}
    with vf.MCPToolEnv(mcp_servers=[cfg], dataset=DATA) as env:
        await env.start()
        gate.unlink()
        os.kill(pids(pidfile)[0], signal.SIGKILL)
        client = ScriptedClient(turns({0: tool_call(("add", {"a": 1, "b": 1}))}))
        out = await env.a_evaluate(client, "m")
        first = out.results[0]
        assert first.completion[1]["content"].startswith("Error: MCP server 'toy' did not answer the call")
        out = await env.a_evaluate(client, "m")  # the restart fails: the tool answers that it is gone
        r = out.results[0]
        assert r.error is None
        assert r.completion[1]["content"] == (
            "Error: MCP server 'toy' is gone: it stopped and could not be started again."
        )


# -- stopping: close(), the finalizer, Ctrl-C -------------------------------------------------------


@needs_mcp
async def test_close_and_finalizer_stop_servers(tmp_path) -> None:
    pidfile = tmp_path / "pids"
    env = vf.MCPToolEnv(mcp_servers=[toy(pidfile=pidfile)], dataset=DATA)
    await env.start()
    (pid,) = pids(pidfile)
    assert alive(pid)
    await env.aclose()
    assert not alive(pid)

    await env.start()  # usable again after close(): a fresh process
    (_, pid2) = pids(pidfile)
    assert alive(pid2)
    del env
    gc.collect()
    deadline = time.monotonic() + 15
    while alive(pid2) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert not alive(pid2), "the finalizer must stop the servers of a collected environment"


CTRL_C_SCRIPT = """
import asyncio, signal, sys
# A process started in the background by a non-interactive shell (as CI jobs may be) inherits
# SIGINT ignored, and Python then never raises KeyboardInterrupt: restore what a terminal gives.
signal.signal(signal.SIGINT, signal.default_int_handler)
import verifiers as vf
from verifiers.testing import ScriptedClient

env = vf.MCPToolEnv(
    mcp_servers=[{{"name": "toy", "command": sys.executable, "args": [{toy!r}], "env": {{"TOY_PIDFILE": {pidfile!r}}}}}],
    per_rollout={per_rollout}, dataset=[{{"question": "q"}}],
)
# The model never answers: the rollout waits in its first model call, servers running.
env.evaluate(ScriptedClient(["never"], latency_s=3600), "m")
"""


@needs_mcp
@pytest.mark.parametrize("per_rollout", [False, True], ids=["shared", "per-rollout"])
def test_ctrl_c_leaves_no_server_process(tmp_path, per_rollout) -> None:
    pidfile = tmp_path / "pids"
    script = CTRL_C_SCRIPT.format(toy=TOY, pidfile=str(pidfile), per_rollout=per_rollout)
    proc = subprocess.Popen(
        [sys.executable, "-c", script], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not pids(pidfile) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert pids(pidfile), f"the server never started: {proc.stdout.read() if proc.poll() is not None else ''}"
        (pid,) = pids(pidfile)
        time.sleep(1.0)  # let the rollout reach its model call
        assert alive(pid)
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0 and "KeyboardInterrupt" in output, output[-2000:]
    assert not alive(pid), f"server {pid} outlived Ctrl-C of its environment"


# -- configuration and the extra ---------------------------------------------------------------------


@needs_mcp
@pytest.mark.parametrize(
    ("servers", "message"),
    [
        ([], "non-empty list"),
        ([{"name": "a b", "command": "x"}], r"mcp_servers\[0\] is invalid: name"),
        ([{"name": "a", "command": "x", "args": "-m srv"}], "args must be a list of strings"),
        ([{"name": "a", "command": "x", "envs": {}}], "envs: Extra inputs are not permitted"),
        ([{"name": "a", "command": "x"}, {"name": "a", "command": "y"}], "repeated: a"),
    ],
    ids=["empty", "bad-name", "args-string", "typo", "duplicate"],
)
def test_bad_server_config_is_a_config_error(servers, message) -> None:
    with pytest.raises(vf.ConfigError, match=message):
        vf.MCPToolEnv(mcp_servers=servers, dataset=DATA)


@needs_mcp
async def test_server_that_fails_to_start_is_a_rollout_error_with_its_stderr() -> None:
    cfg = {"name": "broken", "command": sys.executable,
           "args": ["-c", "import sys; sys.stderr.write('cannot open the ' + 'database'); sys.exit(2)"]}
    with vf.MCPToolEnv(mcp_servers=[cfg], dataset=DATA) as env, pytest.warns(RolloutErrorsWarning):
        out = await env.a_evaluate(ScriptedClient(["unused"]), "m")
    err = out.results[0].error
    assert "failed to start: MCPError: Connection closed" in err.message
    assert err is not None and err.type == "ConfigError"
    assert "MCP server 'broken'" in err.message and "failed to start" in err.message
    assert "its stderr:\ncannot open the database" in err.message


def test_missing_mcp_package_names_the_extra(monkeypatch, tmp_path) -> None:
    monkeypatch.chdir(tmp_path)  # outside the clone: the hint names the clone's path
    for name in [m for m in sys.modules if m == "mcp" or m.startswith("mcp.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "mcp", None)  # `import mcp` now raises ImportError
    with pytest.raises(vf.ConfigError) as info:
        vf.MCPToolEnv(mcp_servers=[toy()], dataset=DATA)
    assert "MCPToolEnv needs the 'mcp' package" in str(info.value)
    root = Path(__file__).resolve().parents[2]
    assert f'pip install -e "{root}[mcp]"' in str(info.value)


def test_import_verifiers_does_not_import_mcp() -> None:
    code = (
        "import sys, verifiers as vf\n"
        "cls = vf.MCPToolEnv\n"
        "loaded = sorted(m for m in sys.modules if m == 'mcp' or m.startswith(('mcp.', 'mcp_types')))\n"
        "assert not loaded, loaded\n"
        "print(cls.__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "MCPToolEnv", out.stderr[-2000:]


# -- a real server from PyPI -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def calculator_python(tmp_path_factory) -> str:
    """A venv with PyPI's mcp-server-calculator 0.2.1 (it needs mcp<2, so not in our environment)."""
    venv = tmp_path_factory.mktemp("calc") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "--python", python, "install", "-q", "--disable-pip-version-check",
         "mcp-server-calculator==0.2.1"],
        capture_output=True, text=True, timeout=600,
    )
    if pip.returncode != 0:
        pytest.skip(f"could not install mcp-server-calculator from PyPI: {pip.stderr[-1000:]}")
    return python


@needs_mcp
@pytest.mark.slow
async def test_pypi_mcp_server_calculator(calculator_python) -> None:
    client = ScriptedClient(turns({0: tool_call(("calculate", {"expression": "2 + 3 * 4"}),
                                               ("calculate", {"expression": "1 / 0"}))}))
    servers = [{"name": "calc", "command": calculator_python, "args": ["-m", "mcp_server_calculator"]}]
    async with vf.MCPToolEnv(mcp_servers=servers, dataset=DATA) as env:
        out = await env.a_evaluate(client, "m")
    r = out.results[0]
    (schema,) = client.calls[0].tools
    assert schema["function"]["name"] == "calculate"
    assert schema["function"]["parameters"]["required"] == ["expression"]
    assert r.completion[1]["content"] == "14"
    assert r.completion[2]["content"].startswith("Error: Tool 'calculate' failed: ")
    assert "division by zero" in r.completion[2]["content"]
