"""Root running the sandbox and isolated agents from another user's private directory.

An isolated run drops every capability, so even uid 0 then gets only what a directory's mode bits
allow: a virtualenv or agent program in another user's home (0750 on current Ubuntu) was out of
reach of the sandboxed code (`import` of the venv's packages failed as if they were not
installed) and of the isolated agent (its interpreter failed to start: "Permission denied"). Now
the closed directory on the way is covered and what the run needs is bound back; where the needed
directory is itself closed, the error names it and the fix. Real runs, as root (skipped otherwise).
Not under /tmp: the run's private /tmp would rebuild the way to a path there with open directories.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import verifiers as vf
from verifiers.testing import ScriptedReply, ScriptedServer, ServerScript

CHAT_ONCE = Path(__file__).parents[1] / "gateway" / "programs" / "chat_once.py"
OTHER = 65534  # the owner of the private home: a user other than root
ROWS = [{"question": "probe", "answer": ""}]


def _chown_tree(root: Path) -> None:
    for path in [root, *root.rglob("*")]:
        os.lchown(path, OTHER, OTHER)


def _venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120)
    site = next(path.glob("lib/python3*/site-packages"))
    (site / "vf_private_probe.py").write_text("ANSWER = 42\n")
    return path / "bin" / "python"


@pytest.fixture(scope="module")
def root_isolated() -> None:
    """Skips unless this is root on Linux with isolated runs and a /var/tmp."""
    if sys.platform != "linux" or os.geteuid() != 0:
        pytest.skip("needs root on Linux (another user's directory that root without capabilities cannot enter)")
    if not os.path.isdir("/var/tmp"):
        pytest.skip("needs /var/tmp (a directory outside the run's private /tmp)")
    found = vf.run_python_sync("pass").isolation
    if not (found.namespaces and found.readonly_fs):
        pytest.skip(f"no isolated runs here: {found.reasons}")


@pytest.fixture(scope="module")
def home(root_isolated: None) -> Iterator[Path]:
    """``HOME/proj/{.venv, agent.py}`` and ``HOME/agent.py``, all owned by uid 65534, HOME mode 0750."""
    root = Path(tempfile.mkdtemp(prefix="vf-home-", dir="/var/tmp"))
    try:
        (root / "proj").mkdir(mode=0o755)
        _venv(root / "proj" / ".venv")
        shutil.copy(CHAT_ONCE, root / "proj" / "agent.py")
        shutil.copy(CHAT_ONCE, root / "agent.py")
        _chown_tree(root)
        root.chmod(0o750)
        yield root
    finally:
        shutil.rmtree(root)


def _caller(python: Path, code: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a caller running ``python`` (that venv's interpreter), with this process's packages."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=120, env=env)


RUN_PROBE = (
    "import verifiers as vf\n"
    "try:\n"
    "    r = vf.run_python_sync('import sys, vf_private_probe; print(vf_private_probe.ANSWER, sys.prefix)')\n"
    "    print('RESULT', r.isolated, repr(r.stdout), repr(r.stderr[-500:]))\n"
    "except vf.ConfigError as exc:\n"
    "    print('CONFIGERROR', exc)\n"
)


def test_sandboxed_code_sees_the_virtualenv_in_another_users_home(home: Path) -> None:
    venv = home / "proj" / ".venv"
    done = _caller(venv / "bin" / "python", RUN_PROBE)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("RESULT True"), done.stdout  # isolated, and ...
    assert f"'42 {venv}\\n'" in done.stdout, done.stdout  # ... the venv's own package imported


def test_a_virtualenv_the_run_cannot_read_is_an_error_naming_it(root_isolated: None) -> None:
    base = Path(tempfile.mkdtemp(prefix="vf-closed-venv-", dir="/var/tmp"))
    try:
        base.chmod(0o755)
        python = _venv(base / "venv")
        _chown_tree(base / "venv")
        (base / "venv").chmod(0o700)  # the venv itself: no cover can open it
        done = _caller(python, RUN_PROBE)
    finally:
        shutil.rmtree(base)
    assert done.returncode == 0, done.stderr[-3000:]
    message = done.stdout
    assert message.startswith("CONFIGERROR the sandboxed code cannot read this Python installation"), message
    assert f"{base / 'venv'} (mode 0700, owner uid {OTHER}" in message and "chmod o+rx" in message, message
    assert "isolation='off'" in message


async def test_an_isolated_agent_runs_from_another_users_home(home: Path) -> None:
    command = [str(home / "proj" / ".venv" / "bin" / "python"), str(home / "proj" / "agent.py"), "calls", "1"]
    with ScriptedServer(ServerScript(replies=[ScriptedReply(content="pong")])) as srv:
        env = vf.AgentEnv(command=command, dataset=ROWS, isolation="require",
                          rubric=vf.Rubric(funcs=[lambda completion, **_: 0.0]))
        out = await env.a_generate(ROWS, vf.make_client(base_url=srv.base_url), "p")
    r = out.results[0]
    assert r.error is None, r.error
    assert r.state["agent"]["isolated"] and r.state["agent"]["stdout"].strip() == "pong"


async def test_an_agent_whose_own_folder_is_closed_fails_naming_the_folder(home: Path) -> None:
    """The program's folder (to stay visible) is the 0750 home itself: not covered, so the error says why."""
    command = [str(home / "proj" / ".venv" / "bin" / "python"), str(home / "agent.py"), "calls", "1"]
    with ScriptedServer(ServerScript()) as srv:
        env = vf.AgentEnv(command=command, dataset=ROWS, isolation="require",
                          rubric=vf.Rubric(funcs=[lambda completion, **_: 0.0]))
        out = await env.a_generate(ROWS, vf.make_client(base_url=srv.base_url), "p")
    err = out.results[0].error
    assert err is not None and err.type == "AgentError", err
    assert f"{home} (mode 0750, owner uid {OTHER}" in err.message and "enter it without capabilities" in err.message
    assert "chmod o+rx" in err.message, err.message
    assert len(srv.requests) == 0
