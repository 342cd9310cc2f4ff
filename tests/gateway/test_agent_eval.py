"""vf-eval runs an agent-program environment (as `vf-init --kind agent` scaffolds it) end to end."""

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
