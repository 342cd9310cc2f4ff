"""The code sandbox protects its caller from hostile code (a policy's tool calls are exactly that).

Every attack runs inside a PID namespace this test creates (`unshare --pid --fork --mount-proc`),
so a sandbox that fails lets ``kill(-1)`` and escaped processes reach only that namespace, never
the machine. The attacks themselves are in `sandbox_attacks.py`; each was checked to succeed with
``isolation="off"`` (the sandbox before namespaces).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from verifiers.tools.sandbox import SandboxLimits, run_python_sync

ATTACKS = Path(__file__).with_name("sandbox_attacks.py")
SECRET = f"vf-caller-secret-{os.getpid()}"



@pytest.fixture(scope="module")
def attacks(tmp_path_factory: pytest.TempPathFactory, pid_namespace_problem: str | None) -> dict[str, Any]:
    reason = pid_namespace_problem
    if reason:
        pytest.skip(reason)
    workdir = tmp_path_factory.mktemp("attacks")
    env = {**os.environ, "VF_CALLER_SECRET": SECRET, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, str(ATTACKS), str(workdir)],
                          capture_output=True, text=True, timeout=240, env=env)
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0 and lines, f"the attack driver died (rc {proc.returncode}): {proc.stderr[-3000:]}"
    out = json.loads(lines[-1])
    for name, value in out.items():
        if isinstance(value, dict):
            assert value["namespaces"], f"{name}: the run had no namespaces: {value}"
    return out


def test_kill_minus_one_reaches_nothing_outside_the_run(attacks: dict[str, Any]) -> None:
    assert attacks["canary_alive_after_kill"]
    assert attacks["canary_alive_at_end"]


def test_the_callers_environment_cannot_be_read_through_proc(attacks: dict[str, Any]) -> None:
    pids, found = attacks["proc"]["stdout"].split("] ")
    assert found.strip() == "[]"
    assert pids == "['1', '2'"  # only the run's own init and itself


def test_setns_and_the_callers_network_are_out_of_reach(attacks: dict[str, Any]) -> None:
    assert ", 0, 0)" not in attacks["setns"]["stdout"]  # no setns succeeded
    assert not attacks["tcp_accepted"]


def test_unix_sockets_are_refused(attacks: dict[str, Any]) -> None:
    assert attacks["unix"]["stdout"].startswith("PermissionError")
    assert not attacks["unix_accepted"]


def test_a_process_that_leaves_the_group_dies_with_the_run(attacks: dict[str, Any]) -> None:
    assert attacks["heartbeats_during"] > 0  # the escaped child did run
    assert attacks["heartbeats_after"] == 0


def test_no_shared_memory_outlives_the_run(attacks: dict[str, Any]) -> None:
    assert attacks["shm"]["stdout"].strip() != "-1"  # the segment was made inside
    assert not attacks["shm_file_left"]
    assert not attacks["sysv_segment_left"]


def test_the_code_runs_without_capabilities_under_seccomp(attacks: dict[str, Any]) -> None:
    caps = attacks["caps"]["stdout"]
    assert "'CapEff': '0000000000000000'" in caps and "'CapBnd': '0000000000000000'" in caps
    assert "'NoNewPrivs': '1'" in caps and "'Seccomp': '2'" in caps


def test_isolation_off_is_reported_as_not_isolated() -> None:
    result = run_python_sync("print(1)", SandboxLimits(isolation="off"))
    assert result.stdout == "1\n" and not result.isolated
