"""vf-eval as a real process against a scripted server process: kill -9, SIGINT/SIGTERM, resume."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from verifiers.testing import ScriptedReply, ScriptedServer, ServerScript

from .conftest import REVERSE_ANSWER, cli_env, read_meta, read_rows, run_cli, run_dirs, vf_eval_cmd

pytestmark = pytest.mark.slow

N, R = 20, 3  # 60 rollouts


def _args(base_url: str, out: Path) -> list[str]:
    return [
        "reverse-text",
        "-m",
        "scripted",
        "-b",
        base_url,
        "-n",
        str(N),
        "-r",
        str(R),
        "-c",
        "4",
        "-o",
        str(out),
    ]


def _start(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*vf_eval_cmd(), *args],
        cwd=cwd,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_rows(out: Path, proc: subprocess.Popen[str], at_least: int, timeout_s: float = 60) -> Path:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        dirs = run_dirs(out)
        results = dirs[0] / "results.jsonl" if dirs else None
        if results is not None and results.exists() and results.read_bytes().count(b"\n") >= at_least:
            return dirs[0]
        if proc.poll() is not None:
            raise AssertionError(f"vf-eval exited early ({proc.returncode}): {proc.communicate()[1]}")
        time.sleep(0.01)
    raise AssertionError("vf-eval saved nothing in time")


def _assert_each_key_once(run_dir: Path) -> None:
    keys = Counter((r["example_id"], r["rollout_index"]) for r in read_rows(run_dir))
    assert set(keys) == {(e, i) for e in range(N) for i in range(R)}
    assert max(keys.values()) == 1


@pytest.fixture
def slow_server():
    script = ServerScript(replies=[ScriptedReply(content=REVERSE_ANSWER)], latency_s=0.1)
    with ScriptedServer.spawn(script, max_lifetime_s=300) as srv:
        yield srv


def test_real_process_end_to_end_keeps_the_key_secret(tmp_path: Path) -> None:
    secret = "sk-process-secret-123"
    with ScriptedServer.spawn(ServerScript(replies=[ScriptedReply(content=REVERSE_ANSWER)])) as srv:
        proc = run_cli(
            ["reverse-text", "-m", "scripted", "-b", srv.base_url, "-k", "VF_SECRET", "-n", "2", "-r", "2", "-s",
             "-o", str(tmp_path), "-v", "--header", "Authorization-Extra: hdr-secret"],
            cwd=tmp_path, VF_SECRET=secret,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (run_dir,) = run_dirs(tmp_path)
    assert f"Saved: {run_dir}" in proc.stdout and "reward" in proc.stdout
    assert len(read_rows(run_dir)) == 4 and read_meta(run_dir)["status"] == "complete"
    for text in (proc.stdout, proc.stderr, *(f.read_text() for f in run_dir.iterdir())):
        assert secret not in text and "hdr-secret" not in text


def test_kill_9_then_resume_gives_every_rollout_exactly_once(tmp_path: Path, slow_server) -> None:
    proc = _start(_args(slow_server.base_url, tmp_path), tmp_path)
    try:
        run_dir = _wait_for_rows(tmp_path, proc, at_least=N * R // 3)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(10)
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    kept = len({(r["example_id"], r["rollout_index"]) for r in read_rows(run_dir)})
    assert 0 < kept < N * R and read_meta(run_dir)["status"] == "running"

    before = slow_server.stats()["n_requests"]
    done = run_cli([*_args(slow_server.base_url, tmp_path), "-R", "--no-progress"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"{kept} rollouts kept, {N * R - kept} to run" in done.stderr
    assert slow_server.stats()["n_requests"] - before == N * R - kept  # nothing saved is asked again
    assert run_dirs(tmp_path) == [run_dir]
    _assert_each_key_once(run_dir)
    meta = read_meta(run_dir)
    assert meta["status"] == "complete" and meta["resumes"] == 1
    assert meta["counts"] == {"expected": N * R, "saved": N * R, "errored": 0}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_marks_the_run_and_keeps_whole_groups(
    tmp_path: Path, slow_server, sig: signal.Signals
) -> None:
    proc = _start(_args(slow_server.base_url, tmp_path), tmp_path)
    try:
        run_dir = _wait_for_rows(tmp_path, proc, at_least=R)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "Interrupted" in err and "Traceback" not in err
    meta = read_meta(run_dir)
    assert meta["status"] == "interrupted" and meta["counts"]["saved"] < N * R
    per_example = Counter(r["example_id"] for r in read_rows(run_dir))
    assert set(per_example.values()) == {R}  # only finished groups are saved

    # The exact command vf-eval printed continues the run.
    (resume_line,) = [line for line in err.splitlines() if line.startswith("Resume with: ")]
    command = shlex.split(resume_line.removeprefix("Resume with: "))
    assert command[0] == "vf-eval" and command[-2:] == ["-R", str(run_dir)]
    assert command[1:-2] == _args(slow_server.base_url, tmp_path)
    done = run_cli(command[1:], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    _assert_each_key_once(run_dir)
    assert read_meta(run_dir)["status"] == "complete"
