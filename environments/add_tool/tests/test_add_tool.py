"""add-tool, a taskset written only against the v1 API, run here: loaded by id, evaluated against the
scripted server (the model calls the Toolset's ``add``), and trained with vf-train on a tiny model,
its reward and metric logged under their names."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import verifiers as vf
from verifiers.testing import ScriptedReply, ScriptedServer, ScriptedToolCall, ServerScript

ROOT = Path(__file__).resolve().parents[3]


def test_the_taskset_loads_by_id_with_its_config_as_keyword_arguments() -> None:
    env = vf.load_environment("add-tool", num_tasks=4, seed=1)
    rows = list(env.eval_dataset or env.dataset)
    assert len(rows) == 4
    first = rows[0]["prompt"]
    assert first[0]["role"] == "system" and "add tool" in first[0]["content"]
    assert first[-1]["content"].startswith("What is ") and " + " in first[-1]["content"]
    other = vf.load_environment("add-tool", num_tasks=4, seed=2)
    assert [r["prompt"][-1]["content"] for r in other.eval_dataset or other.dataset] != [
        r["prompt"][-1]["content"] for r in rows]  # a different seed, different problems
    assert [t["function"]["name"] for t in env.oai_tools] == ["arithmetic_add"]


async def test_a_rollout_that_calls_add_and_answers_the_sum_scores_one() -> None:
    env = vf.load_environment("add-tool", num_tasks=1, seed=3)
    question = (env.eval_dataset or env.dataset)[0]["prompt"][-1]["content"]
    a, b = (int(x) for x in question.removeprefix("What is ").removesuffix("?").split(" + "))
    script = ServerScript(replies=[
        ScriptedReply(turn=0, content=None, tool_calls=[ScriptedToolCall(name="arithmetic_add",
                                                                 arguments=json.dumps({"a": a, "b": b}))]),
        ScriptedReply(turn=1, content=f"The sum is {a + b:,}."),
    ])
    with ScriptedServer(script) as server:
        client = vf.make_client(base_url=server.base_url)
        out = await env.a_evaluate(client, "scripted", num_examples=1, rollouts_per_example=1)
        await client.close()
    result = out.results[0]
    tool_turns = [m for m in result.completion if m["role"] == "tool"]
    assert [m["content"] for m in tool_turns] == [str(a + b)]  # the Toolset added them
    assert result.reward == 1.0 and result.metrics["correct"] == 1.0 and result.metrics["used_tool"] == 1.0


@pytest.mark.slow
def test_vf_train_trains_the_taskset_and_logs_its_reward_and_metric_by_name(tmp_path: Path) -> None:
    out_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "trainers.grpo.cli", "--model", "tiny", "--tiny_model.hidden_size=32",
           "--env_id", "add-tool", "--env_args", json.dumps({"num_tasks": 16, "agent": {"max_turns": 2}}),
           "--max_steps", "2", "--prompts_per_step", "2", "--num_generations", "4", "--max_tokens", "8",
           "--output_dir", str(out_dir), "--progress", "false", "--plot", "false", "--save_every", "0",
           "--num_sample_completions", "0", "--torch_threads", "1"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT / "environments" / "add_tool")}
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        assert {"reward", "rewards/correct", "rewards/used_tool"} <= set(row), sorted(row)


async def test_the_toolset_module_serves_add_over_mcp_as_upstream_starts_it() -> None:
    """``python -m add_tool.toolset`` (upstream's launch) serves ``add`` over MCP; on stdio, as our
    MCP client starts servers, its tool is called by name."""
    pytest.importorskip("mcp")
    from verifiers.tools.mcp_client import MCPConnection, MCPServerConfig

    config = MCPServerConfig(name="arithmetic", command=sys.executable, args=["-m", "add_tool.toolset"],
                             env={"PYTHONPATH": str(ROOT / "environments" / "add_tool") + os.pathsep + str(ROOT)})
    connection = MCPConnection(config)
    try:
        tools = await connection.start()
        assert [t.name for t in tools] == ["add"]
        assert await connection.call("add", {"a": 886440, "b": 404958}) == "1291398"
    finally:
        await connection.close()


async def test_with_a_port_file_the_toolset_serves_streamable_http_as_upstreams_launcher_expects(tmp_path: Path) -> None:
    """Upstream's launcher sets ``MCP_PORT_FILE`` and ``VF_CONFIG``, reads the port, and calls over HTTP."""
    pytest.importorskip("mcp")
    import asyncio

    from mcp import Client

    port_file = tmp_path / "port"
    env = {**os.environ, "MCP_PORT_FILE": str(port_file), "VF_CONFIG": "{}",
           "PYTHONPATH": str(ROOT / "environments" / "add_tool") + os.pathsep + str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "add_tool.toolset"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        for _ in range(600):
            if port_file.is_file() and port_file.read_text().strip():
                break
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
            await asyncio.sleep(0.1)
        async with Client(f"http://127.0.0.1:{port_file.read_text().strip()}/mcp") as client:
            assert [t.name for t in (await client.list_tools()).tools] == ["add"]
            result = await client.call_tool("add", {"a": 2, "b": 40})
            assert [c.text for c in result.content] == ["42"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
