"""AgentEnv(isolation=...): the program in its own namespaces, the gateway its only network peer.

Real runs: the program is a real subprocess, the namespaces are the kernel's, the model calls go
through the gateway's Unix socket via the relay to a ScriptedServer. Nothing here signals a
process: AgentEnv ends its own child's group; the namespace's init takes the rest with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

import verifiers as vf
from verifiers.envs.agent_isolation import isolation_unavailable
from verifiers.gateway import get_gateway
from verifiers.testing import ScriptedReply, ScriptedServer, ServerScript

HERE = Path(__file__).parent
PROGRAM = [sys.executable, str(HERE / "programs" / "isolated_agent.py")]
CHAT_ONCE = [sys.executable, str(HERE / "programs" / "chat_once.py")]
ROWS = [{"question": "probe", "answer": ""}]
UNAVAILABLE = isolation_unavailable() if sys.platform == "linux" else "not Linux"
needs_isolation = pytest.mark.skipif(UNAVAILABLE is not None, reason=f"no isolation here: {UNAVAILABLE}")


def _env(command: list[str], funcs: list[Any] | None = None, **kw: Any) -> vf.AgentEnv:
    rubric = vf.Rubric(funcs=funcs or [lambda completion, **_: 0.0])
    return vf.AgentEnv(command=command, dataset=ROWS, rubric=rubric, **kw)


SLEEPER = b"import time; time.sleep(600)"  # the argv of the program's daemon and child (tests/gateway/programs)


def _with_token(token: str, sleepers_only: bool = False) -> dict[int, int]:
    """Host pid -> pid in its innermost PID namespace, of every live process whose argv holds ``token``
    (with ``sleepers_only``, of the program's daemon and child, not the program or its short-lived forks)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            status = (entry / "status").read_text()
        except OSError:
            continue
        if token.encode() in argv and (SLEEPER in argv or not sleepers_only) and "\nState:\tZ" not in status:
            nspid = next(line for line in status.splitlines() if line.startswith("NSpid:"))
            found[int(entry.name)] = int(nspid.split()[-1])
    return found


async def _watch(token: str, expected: int, seen: dict[int, int], stop: asyncio.Event) -> None:
    """Record the sleepers carrying ``token`` while the rollout runs (the host's view of them); once all
    ``expected`` run, create "seen" in their working directory: the program waits for it."""
    while not stop.is_set():
        now = _with_token(token, sleepers_only=True)
        seen.update(now)
        if len(seen) >= expected and now:
            with contextlib.suppress(OSError):
                Path(f"/proc/{next(iter(now))}/cwd/seen").touch()
        await asyncio.sleep(0.02)


async def _run_watched(env: vf.AgentEnv, srv: ScriptedServer, token: str, expected: int) -> tuple[Any, dict[int, int]]:
    seen: dict[int, int] = {}
    stop = asyncio.Event()
    watcher = asyncio.create_task(_watch(token, expected, seen, stop))
    try:
        out = await env.a_generate(ROWS, vf.make_client(base_url=srv.base_url), "policy")
    finally:
        stop.set()
        await watcher
    return out.results[0], seen


@needs_isolation
async def test_the_program_reaches_the_gateway_and_nothing_else() -> None:
    planted = HERE / "programs" / "planted.txt"
    with socket.socket() as listener, ScriptedServer(ServerScript(replies=[ScriptedReply(content="pong")] * 2)) as srv:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.setblocking(False)
        ports = [str(listener.getsockname()[1]), str(srv.port)]
        command = [*PROGRAM, "net", *ports, "--unix", get_gateway().unix_path]
        out = await _env(command, isolation="require").a_generate(ROWS, vf.make_client(base_url=srv.base_url), "p")
        r = out.results[0]
        assert r.error is None, r.error
        report = json.loads(r.state["agent"]["stdout"])
        assert report["reply"] == "pong" and len(r.tokens) == 1 and r.state["agent"]["isolated"]
        assert all(v.startswith("refused") for v in report["ports"].values()), report
        assert report["outside"].startswith("refused") and report["unix"].startswith("refused"), report
        assert report["workdir_write"] == "written" and report["host_write"].startswith("refused"), report
        assert report["pid"] == 2 and report["visible_pids"] == [1, 2]  # pid 1 is the namespace's init
        assert int(report["cap_eff"], 16) == 0
        with pytest.raises(BlockingIOError):
            listener.accept()  # the relay never forwarded anything to it
        # The same program unisolated reaches all of it: the checks above can fail.
        try:
            out = await _env(command, isolation="none").a_generate(ROWS, vf.make_client(base_url=srv.base_url), "p")
            plain = json.loads(out.results[0].state["agent"]["stdout"])
            assert set(plain["ports"].values()) == {"connected"} and plain["unix"] == "connected", plain
            assert plain["host_write"] == "written" and not out.results[0].state["agent"]["isolated"]
            assert len(plain["visible_pids"]) > 2 and plain["pid"] != 2
        finally:
            planted.unlink(missing_ok=True)
    assert len(srv.requests) == 2  # the program's calls, nothing else


@needs_isolation
async def test_a_setsid_daemon_does_not_survive_the_rollout() -> None:
    token = f"vf-daemon-{uuid.uuid4().hex}"
    inner: dict[str, int] = {}

    def grab(state: dict[str, Any], **_: Any) -> float:
        inner["daemon"] = int((Path(state["workdir"]) / "daemon.pid").read_text())
        return 0.0

    with ScriptedServer(ServerScript()) as srv:
        r, seen = await _run_watched(_env([*PROGRAM, "daemon", token], [grab], isolation="require"), srv, token, 1)
    assert r.error is None and r.stop_reason == "completed", r.error
    assert r.state["agent"]["exit_code"] == 0 and r.state["agent"]["isolated"]
    # The host saw the daemon running, with the pid in its namespace that the program wrote ...
    assert list(seen.values()) == [inner["daemon"]] and inner["daemon"] > 2, (seen, inner)
    daemon_host_pid = next(iter(seen))
    # ... and it is gone now, though it had left the program's process group and session.
    assert daemon_host_pid != inner["daemon"] and _with_token(token) == {}
    assert not Path(f"/proc/{daemon_host_pid}").exists() or token.encode() not in Path(
        f"/proc/{daemon_host_pid}/cmdline").read_bytes()


@needs_isolation
async def test_timeout_ends_the_whole_isolated_tree() -> None:
    token = f"vf-hang-{uuid.uuid4().hex}"
    graceful: list[str] = []

    def grab(state: dict[str, Any], **_: Any) -> float:
        graceful.append((Path(state["workdir"]) / "terminated").read_text())
        return 0.0

    with ScriptedServer(ServerScript()) as srv:
        env = _env([*PROGRAM, "hang", token], [grab], isolation="require", timeout_s=4.0)
        r, seen = await _run_watched(env, srv, token, 2)
    assert r.stop_reason == "timeout" and r.error is None and r.state["agent"]["timed_out"]
    assert len(r.tokens) == 1 and len(seen) == 2, seen  # the setsid daemon and the child in the group
    assert graceful == ["SIGTERM"]  # the program got the SIGTERM before the namespace went
    assert _with_token(token) == {}


@needs_isolation
async def test_cancelling_the_rollout_ends_the_whole_isolated_tree() -> None:
    token = f"vf-cancel-{uuid.uuid4().hex}"
    state: dict[str, Any] = {}
    with ScriptedServer(ServerScript()) as srv:
        env = _env([*PROGRAM, "hang", token], isolation="require", timeout_s=120.0)
        task = asyncio.create_task(env.rollout(vf.make_client(base_url=srv.base_url), "policy",
                                               [{"role": "user", "content": "t"}], state=state))
        try:
            for _ in range(400):  # until its daemon and its child both run
                if len(_with_token(token, sleepers_only=True)) == 2:
                    break
                await asyncio.sleep(0.05)
            assert len(_with_token(token, sleepers_only=True)) == 2
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            for _ in range(100):
                if not _with_token(token):
                    break
                await asyncio.sleep(0.05)
            assert _with_token(token) == {}
        finally:
            await env.release_state(state)


@needs_isolation
async def test_a_missing_program_is_an_agent_error_not_an_isolation_error() -> None:
    with ScriptedServer(ServerScript()) as srv:
        out = await _env(["/nonexistent/agent-binary"], isolation="require").a_generate(
            ROWS, vf.make_client(base_url=srv.base_url), "p")
    err = out.results[0].error
    assert err is not None and err.type == "AgentError" and "could not start" in err.message, err
    assert "No such file or directory" in err.message


# The refusal, on any Linux machine: a child process forbids itself unshare() with a seccomp filter
# (so every namespace is out of reach, as without unprivileged user namespaces), then evaluates.
_UNSHARE = {"x86_64": (0xC000003E, 272), "aarch64": (0xC00000B7, 97)}
_NO_UNSHARE_EVAL = r"""
import asyncio, ctypes, json, logging, sys
arch, nr = json.loads(sys.argv[1])
class F(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]
class P(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(F))]
prog = [(0x20, 0, 0, 4), (0x15, 0, 3, arch), (0x20, 0, 0, 0), (0x15, 0, 1, nr), (0x06, 0, 0, 0x00050001),
        (0x06, 0, 0, 0x7FFF0000)]
table = (F * len(prog))(*[F(*i) for i in prog])
libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(38, 1, 0, 0, 0) == 0
assert libc.prctl(22, 2, ctypes.byref(P(len(prog), table)), 0, 0) == 0

import verifiers as vf
from verifiers.testing import ScriptedServer, ServerScript
logging.basicConfig(level=logging.WARNING, format="LOG %(name)s %(message)s")
rows = [{"question": "q", "answer": ""}]
out = {}
with ScriptedServer(ServerScript()) as srv:
    client = vf.make_client(base_url=srv.base_url)
    for mode in ("require", "auto"):
        env = vf.AgentEnv(command=json.loads(sys.argv[2]), dataset=rows, isolation=mode,
                          rubric=vf.Rubric(funcs=[lambda completion, **_: 0.0]))
        res = asyncio.run(env.a_generate(rows * 2, client, "policy")).results
        out[mode] = [{"error": r.error and [r.error.type, r.error.message], "isolated": r.state["agent"].get("isolated"),
                      "stop": r.stop_reason} for r in res]
    out["requests"] = len(srv.requests)
print("RESULT " + json.dumps(out))
"""


@pytest.mark.skipif(platform.machine() not in _UNSHARE or sys.platform != "linux", reason="seccomp numbers for x86_64/aarch64")
def test_require_refuses_with_the_reason_and_auto_runs_unisolated_with_one_warning() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _NO_UNSHARE_EVAL, json.dumps(_UNSHARE[platform.machine()]), json.dumps(CHAT_ONCE)],
        capture_output=True, text=True, timeout=240, env={**os.environ, "PYTHONPATH": str(HERE.parents[1])},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.split("RESULT ", 1)[1])
    for refused in out["require"]:
        assert refused["error"][0] == "AgentIsolationError" and refused["stop"] == "error", refused
        message = refused["error"][1]
        assert "missing: namespaces (unshare: Operation not permitted" in message, message
        assert "unprivileged user namespaces" in message and "isolation='auto'" in message
    assert [a["error"] for a in out["auto"]] == [None, None] and not any(a["isolated"] for a in out["auto"])
    assert out["requests"] == 2  # only auto's rollouts ran the program
    warnings = [line for line in done.stderr.splitlines() if "run UNISOLATED" in line]
    assert len(warnings) == 1 and "unshare: Operation not permitted" in warnings[0], done.stderr[-2000:]


@pytest.mark.skipif(UNAVAILABLE is None, reason="isolation works here (the refusal is tested with seccomp above)")
async def test_require_refuses_on_this_machine() -> None:
    with ScriptedServer(ServerScript()) as srv:
        out = await _env(CHAT_ONCE, isolation="require").a_generate(ROWS, vf.make_client(base_url=srv.base_url), "p")
    err = out.results[0].error
    assert err is not None and err.type == "AgentIsolationError" and "missing:" in err.message
    assert len(srv.requests) == 0


@needs_isolation
async def test_an_unreachable_gateway_socket_is_a_refusal_that_says_so(tmp_path: Path) -> None:
    from verifiers.envs.agent_isolation import run_isolated

    with socket.socket(socket.AF_UNIX) as bound_not_listening:
        bound_not_listening.bind(str(tmp_path / "gw.sock"))
        env = {"PATH": os.defpath, "OPENAI_BASE_URL": "http://127.0.0.1:5555/v1"}
        run, report = await run_isolated(["true"], str(tmp_path), env, 30, str(tmp_path / "gw.sock"))
    assert run is None and not report.namespaces
    assert f"relay: cannot reach {tmp_path / 'gw.sock'}: Connection refused" in report.refusal()
    assert "the gateway's Unix socket must exist and accept connections" in report.refusal()


@needs_isolation
async def test_a_program_and_virtualenv_under_tmp_stay_visible(tmp_path: Path) -> None:
    """The private /tmp must not hide the program itself: a checkout or a virtualenv under /tmp
    (CI clones there) is bound back read-only."""
    import shutil

    assert str(tmp_path).startswith("/tmp/")
    program = tmp_path / "checkout" / "chat_once.py"
    program.parent.mkdir()
    shutil.copy(HERE / "programs" / "chat_once.py", program)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    with ScriptedServer(ServerScript(replies=[ScriptedReply(content="pong")])) as srv:
        env = _env([str(venv / "bin" / "python"), str(program), "calls", "1"], isolation="require")
        out = await env.a_generate(ROWS, vf.make_client(base_url=srv.base_url), "p")
    r = out.results[0]
    assert r.error is None, r.error
    assert r.state["agent"]["isolated"] and r.state["agent"]["stdout"].strip() == "pong"


@needs_isolation
async def test_the_memory_cap_holds_the_whole_namespace() -> None:
    """The cgroup takes in the bootstrap, so the namespace and the program are in it; the program's
    death by the OOM killer comes back as its own SIGKILL."""
    from verifiers.tools.sandbox_cgroup import make_cgroup

    probe, why = make_cgroup(64, None)
    if probe is None:
        pytest.skip(f"no cgroup here: {why}")
    for d in probe.dirs:
        d.rmdir()
    spawner = [sys.executable, str(HERE / "programs" / "spawner.py")]
    with ScriptedServer(ServerScript()) as srv:
        client = vf.make_client(base_url=srv.base_url)
        over = await _env([*spawner, "alloc", "t", "512"], isolation="require", memory_mb=128).a_generate(ROWS, client, "p")
        under = await _env([*spawner, "alloc", "t", "16"], isolation="require", memory_mb=128).a_generate(ROWS, client, "p")
    agent = over.results[0].state["agent"]
    assert agent["isolated"] and agent["memory_exceeded"] and agent["exit_code"] == -9, agent
    assert "Traceback" not in agent["stderr"], agent["stderr"]
    agent = under.results[0].state["agent"]
    assert under.results[0].error is None and agent["isolated"] and not agent["memory_exceeded"], agent
    assert agent["stdout"].splitlines()[-1] == "allocated"
