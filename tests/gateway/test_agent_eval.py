"""vf-eval runs an agent-program environment (as `vf-init --kind agent` scaffolds it) and an MCPToolEnv end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from verifiers.cli.eval import main
from verifiers.hub.scaffold import scaffold_environment
from verifiers.testing import ScriptedReply, ScriptedServer, ScriptedToolCall, ServerScript


def test_vf_eval_runs_an_agent_env_and_saves_its_calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = Path(scaffold_environment("eval-agent-env", tmp_path / "environments", kind="agent").package_dir)
    monkeypatch.syspath_prepend(str(package))
    monkeypatch.chdir(tmp_path)
    script = ServerScript(replies=[
        ScriptedReply(turn=0, tool_calls=[ScriptedToolCall(name="calculate", arguments='{"expression": "99 * 99"}')]),
        ScriptedReply(content="{last_message}"),
    ])
    with ScriptedServer(script) as srv:
        code = main(["eval-agent-env", "-m", "scripted", "-b", srv.base_url, "-n", "2", "-r", "2", "-s",
                     "-o", str(tmp_path / "out"), "--no-progress"])
    assert code == 0
    (results,) = (tmp_path / "out").rglob("results.jsonl")
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert len(rows) == 4
    by_answer = {r["answer"]: r for r in rows}
    assert by_answer["9801"]["reward"] == 1.0 and by_answer["999"]["reward"] == 0.0  # the script computes 99*99
    first = rows[0]
    assert first["completion"][-1]["role"] == "assistant" and first["completion"][1]["role"] == "tool"
    assert first["prompt"][0]["role"] == "system"  # the program's own first call, not the dataset row
    assert srv.n_requests == 8 and {b["model"] for b in srv.requests} == {"scripted"}


def test_vf_eval_runs_an_mcp_tool_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mcp")
    toy = Path(__file__).parents[1] / "envs" / "mcp_data" / "toy_server.py"
    (tmp_path / "mcp_eval_env.py").write_text(
        "import sys\nimport verifiers as vf\n\n"
        "def exact(completion, answer, **_):\n    return float(completion[-1]['content'] == answer)\n\n"
        "def load_environment(**kwargs):\n"
        f"    server = {{'name': 'toy', 'command': sys.executable, 'args': [{str(toy)!r}, '--name', 'toy']}}\n"
        "    return vf.MCPToolEnv(mcp_servers=[server], dataset=[{'question': 'What is 2+3?', 'answer': '5'}],\n"
        "                         rubric=vf.Rubric(funcs=[exact]), max_turns=3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    script = ServerScript(replies=[
        ScriptedReply(turn=0, tool_calls=[ScriptedToolCall(name="add", arguments='{"a": 2, "b": 3}')]),
        ScriptedReply(content="{last_message}"),  # the tool's result
    ])
    with ScriptedServer(script) as srv:
        code = main(["mcp-eval-env", "-m", "scripted", "-b", srv.base_url, "-n", "1", "-r", "2", "-s",
                     "-o", str(tmp_path / "out"), "--no-progress"])
    assert code == 0
    (results,) = (tmp_path / "out").rglob("results.jsonl")
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert [r["reward"] for r in rows] == [1.0, 1.0]
    assert rows[0]["completion"][1] == {"role": "tool", "content": "5", "tool_call_id": rows[0]["completion"][1]["tool_call_id"]}
    tools = srv.requests[0]["tools"]
    assert "add" in {t["function"]["name"] for t in tools}  # the server's tools, listed to the model
