"""Two FSDP processes (``accelerate launch --config_file examples/accelerate/fsdp.yaml``, gloo) against a real vLLM server.

The parameters are sharded, so no rank holds whole weights: after each step every rank joins
one gather into its full copy, the ranks compare fingerprints of the gathered weights, and
rank 0 alone pushes them to the managed server, verified by the logprob probe. Mechanics only
(2 steps); the pattern and the helpers are tests/vllm/test_vllm_ddp.py's.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
HERE = Path(__file__).parent
FSDP_YAML = HERE.parents[1] / "examples" / "accelerate" / "fsdp.yaml"


def _ddp_helpers() -> ModuleType:
    spec = importlib.util.spec_from_file_location("vf_tests_vllm_ddp", HERE / "test_vllm_ddp.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


ddp = _ddp_helpers()
env_dir = ddp.env_dir  # the logging environment's module, as a fixture of this file too


def test_two_sharded_processes_sync_one_managed_server_every_step(
    tmp_path: Path, env_dir: Path, quickstart_vllm: Path
) -> None:
    shipped = ddp.quickstart(quickstart_vllm)
    out, log, steps = tmp_path / "run", tmp_path / "scored.jsonl", 2
    config = tmp_path / "run.toml"
    config.write_text(ddp.settings(out, log, shipped["tiny_model"], shipped["vllm"]))
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(FSDP_YAML),
           "--main_process_port", str(ddp.free_port()), "-m", "trainers.grpo.cli", str(config),
           "--max_steps", str(steps), *ddp.QUIET]
    code, output = ddp.run(cmd, ddp.child_env(env_dir), tmp_path / "launch.log")
    assert code == 0, ddp.launch_failure(output)
    assert "FSDP2 (fully_shard)" in output, output[-3000:]
    rows = ddp.metrics(out)
    assert [r["step"] for r in rows] == list(range(1, steps + 1))
    # every sync verified by the probe; the ranks' fingerprints of their gathered weights equal
    ddp.assert_synced(rows, ranks=2, servers=1)
    lines = ddp.scored(log)
    ddp.assert_whole_disjoint_groups(lines, steps)
    ready = [ln for ln in output.splitlines() if "vLLM ready:" in ln]
    assert len(ready) == 1, output[-3000:]
    server_pid = int(ready[0].rsplit("(pid ", 1)[1].split(")")[0])
    ddp.assert_gone({server_pid, *ddp.training_pids(lines)})
