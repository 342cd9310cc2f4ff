"""No process an agent program starts outlives its rollout, without isolation (``isolation="none"``);
its memory and process caps (``AgentEnv(memory_mb=..., max_processes=...)``) with a real cgroup.

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


def _env(mode: str, token: str, *args: str, **kw: Any) -> vf.AgentEnv:
    return vf.AgentEnv(command=[*SPAWNER, mode, token, *args], dataset=ROWS,
                       rubric=vf.Rubric(funcs=[lambda completion, **_: 0.0]), **kw)


async def _rollout(mode: str, *args: str, **kw: Any) -> tuple[Any, list[list[int]]]:
    token = f"vf-reaper-{uuid.uuid4().hex}"
    with ScriptedServer(ServerScript()) as srv:
        out = await _env(mode, token, *args, **kw).a_generate(ROWS, vf.make_client(base_url=srv.base_url), "policy")
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


# -- caps ----------------------------------------------------------------------------------------
def _caps_unavailable() -> str | None:
    from verifiers.tools.sandbox_cgroup import make_cgroup

    cgroup, why = make_cgroup(64, 4)
    for d in cgroup.dirs if cgroup is not None else []:
        d.rmdir()
    return None if cgroup is not None else why


CAPS_UNAVAILABLE = _caps_unavailable() if sys.platform == "linux" else "not Linux"
needs_caps = pytest.mark.skipif(CAPS_UNAVAILABLE is not None, reason=f"no cgroup here: {CAPS_UNAVAILABLE}")


@pytest.fixture
def made_cgroups(monkeypatch: pytest.MonkeyPatch) -> list[list[Path]]:
    """The directories of every cgroup AgentEnv makes (the real make_cgroup, watched)."""
    import verifiers.envs.agent_env as agent_env

    made: list[list[Path]] = []
    real = agent_env.make_cgroup

    def watched(*args: Any, **kw: Any) -> Any:
        cgroup, why = real(*args, **kw)
        if cgroup is not None:
            made.append(list(cgroup.dirs))
        return cgroup, why

    monkeypatch.setattr(agent_env, "make_cgroup", watched)
    return made


@needs_caps
async def test_memory_cap_ends_a_program_that_exceeds_it(made_cgroups: list[list[Path]]) -> None:
    r, _ = await _rollout("alloc", "512", memory_mb=128)
    agent = r.state["agent"]
    assert agent["memory_exceeded"] and not agent["processes_exceeded"], agent
    assert agent["exit_code"] == -signal.SIGKILL and "allocated" not in agent["stdout"]
    assert r.error is not None and r.error.type == "AgentCrashedError"
    assert len(made_cgroups) == 2 and not any(d.exists() for dirs in made_cgroups for d in dirs)  # probe + run
    # Under the cap, the same program runs to the end.
    r, _ = await _rollout("alloc", "32", memory_mb=128)
    assert r.error is None and "allocated" in r.state["agent"]["stdout"] and not r.state["agent"]["memory_exceeded"]


@needs_caps
async def test_process_cap_counts_the_whole_tree(made_cgroups: list[list[Path]]) -> None:
    r, pids = await _rollout("fork", "6", max_processes=4)
    with _no_survivors(pids) as left:
        forked = json.loads(r.state["agent"]["stdout"].splitlines()[1])
        assert forked["started"] == 3 and len(forked["failed"]) == 3, forked  # the program itself is the 4th
        assert all(f.startswith("BlockingIOError") for f in forked["failed"]), forked
        assert r.state["agent"]["processes_exceeded"] and not r.state["agent"]["memory_exceeded"]
        assert r.error is None and r.state["agent"]["exit_code"] == 0
        assert left == []
    assert not any(d.exists() for dirs in made_cgroups for d in dirs)


def test_caps_that_cannot_be_applied_are_refused_with_the_reason_and_the_fix(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from verifiers.tools.sandbox_cgroup import CGROUP_ENV

    monkeypatch.setenv(CGROUP_ENV, str(tmp_path / "not-a-cgroup"))
    for caps in ({"memory_mb": 512}, {"max_processes": 8}):
        with pytest.raises(vf.ConfigError) as refused:
            _env("setsid", "t", **caps)
        message = str(refused.value)
        assert f"{tmp_path / 'not-a-cgroup'}: No such file or directory" in message, message
        assert "Delegate=yes" in message and f"{CGROUP_ENV}=/sys/fs/cgroup/<path>" in message
        assert "leave memory_mb and max_processes unset" in message
    for bad in ({"memory_mb": 0}, {"max_processes": -1}, {"memory_mb": 1.5}, {"max_processes": True}):
        with pytest.raises(vf.ConfigError, match="must be a positive integer"):
            _env("setsid", "t", **bad)


_RUNNER = r"""
import asyncio, sys
from verifiers.envs.agent_program import run_program
program = ("import subprocess, sys, time\n"
           "d = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'], start_new_session=True)\n"
           "open('pids.part', 'w').write(f'{d.pid} {__import__(\"os\").getpid()}')\n"
           "__import__('os').rename('pids.part', 'pids')\n"
           "time.sleep(300)")
asyncio.run(run_program([sys.executable, "-c", program], sys.argv[1], {"PATH": "/usr/bin:/bin"}, 600))
"""


def test_a_daemon_does_not_outlive_the_process_that_ran_the_rollout(tmp_path: Path) -> None:
    """The trainer itself dies (SIGKILL, by the test that started it): its launchers end their programs' trees."""
    import subprocess
    import time

    runner = subprocess.Popen([sys.executable, "-c", _RUNNER, str(tmp_path)],
                              env={**os.environ, "PYTHONPATH": str(HERE.parents[1])})
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "pids").exists() and time.monotonic() < deadline and runner.poll() is None:
            time.sleep(0.02)
        pids = [[pid, _start_time(pid)] for pid in map(int, (tmp_path / "pids").read_text().split())]
        assert len(_survivors(pids)) == 2  # the daemon and the program
    finally:
        runner.kill()
        runner.wait()
    for _ in range(250):  # the launcher's SIGTERM, then up to its grace: not at once
        if not _survivors(pids):
            break
        time.sleep(0.02)
    with _no_survivors(pids) as left:
        assert left == [], f"the program or its daemon outlived the process that ran the rollout: {left}"
