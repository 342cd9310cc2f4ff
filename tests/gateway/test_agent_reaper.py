"""No process an agent program starts outlives its rollout, without isolation (``isolation="none"``).

Each test runs tests/gateway/programs/spawner.py as a real AgentEnv program against a scripted
server. The program prints the pid and start time of every process it leaves behind; once the
rollout has returned, each must be gone: no ``/proc/PID``, or a different process under a reused
pid (another start time). A zombie still has its ``/proc/PID`` and start time: it is not gone.
If one survives (the code before the launcher), the test kills it, by pid, after failing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

import verifiers as vf
from verifiers.testing import ScriptedServer, ServerScript

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the subreaper launcher is Linux-only")

HERE = Path(__file__).parent
SPAWNER = [sys.executable, str(HERE / "programs" / "spawner.py")]
ROWS = [{"question": "spawn", "answer": ""}]


def _start_time(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat (zombies have it too), or None when there is no such process."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (FileNotFoundError, ProcessLookupError):
        return None


def _survivors(pids: list[list[int]]) -> list[int]:
    return [pid for pid, start in pids if _start_time(pid) == start]


@contextlib.contextmanager
def _no_survivors(pids: list[list[int]]) -> Any:
    """Assert that none of ``pids`` exists any more; kill (SIGKILL, by pid) those that do."""
    left = _survivors(pids)
    try:
        yield left
    finally:
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _env(mode: str, token: str, **kw: Any) -> vf.AgentEnv:
    return vf.AgentEnv(command=[*SPAWNER, mode, token], dataset=ROWS,
                       rubric=vf.Rubric(funcs=[lambda completion, **_: 0.0]), **kw)


async def _rollout(mode: str, **kw: Any) -> tuple[Any, list[list[int]]]:
    token = f"vf-reaper-{uuid.uuid4().hex}"
    with ScriptedServer(ServerScript()) as srv:
        out = await _env(mode, token, **kw).a_generate(ROWS, vf.make_client(base_url=srv.base_url), "policy")
    r = out.results[0]
    stdout = r.state["agent"]["stdout"]
    return r, json.loads(stdout.splitlines()[0])["pids"] if stdout else []


@pytest.mark.parametrize("mode", [
    "setsid",  # a daemon in its own session: it left the process group that used to be ended
    "double_fork",  # the classic daemon: orphaned at once, reparented away from the program
    pytest.param("ignores_term", marks=pytest.mark.slow),  # SIGTERM ignored: the grace, then SIGKILL
])
async def test_nothing_the_program_started_survives_the_rollout(mode: str) -> None:
    r, pids = await _rollout(mode)
    with _no_survivors(pids) as left:
        assert r.error is None and r.stop_reason == "completed", r.error
        assert r.state["agent"]["exit_code"] == 0 and not r.state["agent"]["isolated"]
        assert len(pids) == 1 and pids[0][0] != r.state["agent"]["run"].pid
        assert r.state["agent"]["stdout"] == json.dumps({"pids": pids}) + "\n"  # the program's output, unchanged
        assert left == [], f"still running after the rollout: {left}"


@pytest.mark.slow
async def test_a_program_still_running_at_the_timeout_goes_with_its_daemon() -> None:
    r, pids = await _rollout("hang", timeout_s=3.0)
    with _no_survivors(pids) as left:
        assert r.stop_reason == "timeout" and r.error is None and r.state["agent"]["timed_out"]
        assert len(pids) == 2 and pids[1][0] == r.state["agent"]["run"].pid  # the daemon, the program itself
        assert r.state["agent"]["exit_code"] == -signal.SIGTERM  # it died of the timeout's SIGTERM, as before
        assert left == [], f"still running after the rollout: {left}"


async def test_cancelling_the_rollout_ends_a_daemon_too(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids.json"
    state: dict[str, Any] = {}
    with ScriptedServer(ServerScript()) as srv:
        env = _env("hang", f"vf-reaper-{uuid.uuid4().hex}", env={"PID_FILE": str(pid_file)}, timeout_s=120.0)
        task = asyncio.create_task(env.rollout(vf.make_client(base_url=srv.base_url), "policy",
                                               [{"role": "user", "content": "t"}], state=state))
        try:
            for _ in range(600):
                if pid_file.exists() or task.done():
                    break
                await asyncio.sleep(0.02)
            pids = json.loads(pid_file.read_text())["pids"]
            assert len(_survivors(pids)) == 2  # both run
            task.cancel()  # what Ctrl-C does to a run
            with pytest.raises(asyncio.CancelledError):
                await task
        finally:
            await env.release_state(state)
    with _no_survivors(pids) as left:
        assert left == [], f"still running after the cancelled rollout: {left}"


@pytest.mark.parametrize(("mode", "exit_code", "stderr"), [("exit7", 7, "bye\n"), ("killed", -signal.SIGKILL, "")])
async def test_the_programs_exit_status_and_output_come_through_unchanged(mode: str, exit_code: int,
                                                                          stderr: str) -> None:
    r, pids = await _rollout(mode)
    assert pids == [] and r.state["agent"]["exit_code"] == exit_code
    assert r.state["agent"]["stderr"] == stderr and r.state["agent"]["stdout"] == '{"pids": []}\n'
    assert r.error is not None and r.error.type == "AgentCrashedError" and f"code {exit_code}" in r.error.message
