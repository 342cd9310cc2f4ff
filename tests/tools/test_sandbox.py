"""run_python: limits, output handling and clean-up of processes and files."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import pytest

from verifiers.tools.sandbox import SandboxLimits, SandboxResult, python_tool, run_python, run_python_sync

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox relies on Linux rlimits")


def alive(pid: int) -> bool:
    """True while `pid` is a live process (an unreaped zombie counts as dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def running(marker: str) -> list[int]:
    """Host pids of live processes whose command line contains ``marker``.

    Isolated runs have their own PID namespace, so the pids the code prints mean nothing here:
    processes are found by something unique in their command line instead (the run's
    directory is in the sandbox's own arguments; children get a unique argument).
    """
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def unique_sleep() -> str:
    """A `sleep` argument no other process has: 60 seconds and a unique fraction."""
    return f"60.{os.getpid()}{time.monotonic_ns() % 10**9:09d}"


async def test_prints_output() -> None:
    result = await run_python("print('hello', 6 * 7)")
    assert result.stdout == "hello 42\n"
    assert result.stderr == ""
    assert result.exit_code == 0
    assert not (result.timed_out or result.memory_exceeded or result.cpu_exceeded)
    assert result.to_tool_output() == "hello 42"


async def test_exception_gives_traceback_and_nonzero_exit() -> None:
    result = await run_python("print('before')\ndef f():\n    return 1 / 0\nf()\n")
    assert result.exit_code == 1
    assert "Traceback" in result.stderr
    assert 'File "main.py", line 3, in f' in result.stderr
    assert "ZeroDivisionError" in result.stderr
    assert "<frozen runpy>" not in result.stderr
    output = result.to_tool_output()
    assert output.startswith("before\nTraceback")
    assert output.endswith("[exit code 1]")


async def test_stdin_is_passed() -> None:
    result = await run_python("import sys\nprint(sys.stdin.read()[::-1])", stdin="abc")
    assert result.stdout == "cba\n"


async def test_wall_timeout_kills_the_process_group() -> None:
    nap = unique_sleep()
    code = (
        "import subprocess, time\n"
        f"child = subprocess.Popen(['sleep', '{nap}'])\n"
        "import os\n"
        "print(os.getcwd(), flush=True)\n"
        "while True:\n"
        "    pass\n"
    )
    result = await run_python(code, SandboxLimits(wall_time_s=1))
    assert result.timed_out
    assert result.exit_code is None
    assert 1 <= result.duration_s < 4
    workdir = result.stdout.strip()
    assert workdir.startswith("/")
    assert running(workdir) == [] and running(nap) == []
    assert "[timed out after" in result.to_tool_output()


async def test_background_children_die_after_normal_exit() -> None:
    nap = unique_sleep()
    code = f"import subprocess\nprint(subprocess.Popen(['sleep', '{nap}']).pid)\n"
    result = await run_python(code)
    assert result.exit_code == 0
    assert running(nap) == []


async def test_cpu_limit() -> None:
    result = await run_python("while True:\n    pass\n", SandboxLimits(cpu_time_s=1, wall_time_s=10))
    assert result.cpu_exceeded
    assert not result.timed_out
    assert result.duration_s < 5
    assert "CPU time limit" in result.to_tool_output()


async def test_memory_limit() -> None:
    result = await run_python("data = bytearray(8 * 1024**3)\n", SandboxLimits(memory_mb=256))
    assert result.memory_exceeded
    assert result.exit_code == 1
    assert "MemoryError" in result.stderr
    assert "memory limit exceeded" in result.to_tool_output()


async def test_memory_error_caught_by_the_code_is_not_reported() -> None:
    code = "try:\n    bytearray(8 * 1024**3)\nexcept MemoryError:\n    print('handled')\n"
    result = await run_python(code, SandboxLimits(memory_mb=256))
    assert result.stdout == "handled\n"
    assert not result.memory_exceeded


async def test_file_size_limit() -> None:
    code = "open('big', 'wb').write(b'x' * (3 * 1024 * 1024))\n"
    result = await run_python(code, SandboxLimits(max_file_size_mb=1))
    assert result.exit_code == 1
    assert "File too large" in result.stderr


async def test_output_is_truncated_with_a_marker() -> None:
    result = await run_python("print('a' * 10_000_000)\nimport sys\nprint('tail', file=sys.stderr)")
    assert result.exit_code == 0
    assert len(result.stdout) < 8100
    assert result.stdout.startswith("aaaa")
    assert "... [truncated 9992001 chars] ..." in result.stdout
    assert result.stderr == "tail\n"


async def test_small_output_limit_keeps_head_and_tail() -> None:
    result = await run_python("print('start' + 'x' * 1000 + 'end')", SandboxLimits(max_output_chars=20))
    head, tail = result.stdout.split("[truncated")
    assert head.startswith("start")
    assert tail.endswith("end\n")


async def test_socket_connect_is_refused() -> None:
    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    code = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\nprint('connected')\n"
    async with server:
        blocked = await run_python(code)
        allowed = await run_python(code, SandboxLimits(network=True))
    assert blocked.exit_code == 1
    assert "PermissionError" in blocked.stderr
    assert "connected" not in blocked.stdout
    assert allowed.stdout == "connected\n", allowed.stderr


async def test_dns_lookup_is_refused() -> None:
    result = await run_python("import socket\nsocket.getaddrinfo('localhost', 80)\n")
    assert "PermissionError" in result.stderr


async def test_fresh_directory_removed_afterwards() -> None:
    code = (
        "import os\n"
        "open('scratch.txt', 'w').write('x')\n"
        "print(os.getcwd())\n"
        "print(os.environ['HOME'])\n"
        "print(sorted(os.listdir('.')))\n"
    )
    first = await run_python(code)
    second = await run_python(code)
    cwd, home, listing = first.stdout.splitlines()
    assert home == cwd
    assert listing == "['main.py', 'scratch.txt']"
    assert second.stdout.splitlines()[0] != cwd
    assert not Path(cwd).exists()
    assert not Path(cwd).parent.exists()


async def test_environment_is_minimal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VF_SECRET_TOKEN", "hunter2")
    result = await run_python("import os\nprint('VF_SECRET_TOKEN' in os.environ)")
    assert result.stdout == "False\n"


async def test_cancellation_kills_the_child(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    pid_file.touch()
    pid_file.chmod(0o666)
    code = f"import os, time\nopen({str(pid_file)!r}, 'w').write(os.getcwd())\ntime.sleep(60)\n"
    # The code reports through a host directory: the only place it may write besides its own tmpfs.
    task = asyncio.create_task(run_python(code, SandboxLimits(wall_time_s=60, writable_paths=[str(tmp_path)])))
    for _ in range(500):
        if pid_file.read_text():
            break
        await asyncio.sleep(0.01)
    workdir = pid_file.read_text()
    assert running(workdir)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert running(workdir) == []


def test_sync_wrapper() -> None:
    assert run_python_sync("print(1 + 1)").stdout == "2\n"


async def test_python_tool() -> None:
    from verifiers.tools.schema import tool_schema

    tool = python_tool(SandboxLimits(wall_time_s=5))
    schema = tool_schema(tool)["function"]
    assert schema["name"] == "python"
    assert schema["description"] == "Run Python code and return what it prints."
    assert schema["parameters"]["required"] == ["code"]
    assert schema["parameters"]["properties"]["code"]["description"].startswith("Python source")
    assert await tool("print(sum(range(10)))") == "45"
    assert await tool("x = 1") == "[no output; use print() to see values]"


def test_to_tool_output_notes() -> None:
    assert SandboxResult(stdout="out\n", stderr="warn\n", exit_code=2).to_tool_output() == (
        "out\nwarn\n[exit code 2]"
    )
    assert SandboxResult(exit_code=-9).to_tool_output() == "[killed by SIGKILL]"
    assert SandboxResult(stdout="x", exit_code=0).to_tool_output() == "x"


def test_cgroup_v2_directory_named_by_the_knob(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """VF_SANDBOX_CGROUP=<dir>: the run's cgroup v2 is made there with the totals (a plain directory
    stands in for cgroupfs, so this checks the files written, not the kernel's enforcement)."""
    from verifiers.tools.sandbox_cgroup import CGROUP_ENV, make_cgroup

    DEFAULTS = SandboxLimits()

    (tmp_path / "cgroup.controllers").write_text("cpu io memory pids\n")
    (tmp_path / "cgroup.subtree_control").write_text("\n")
    monkeypatch.setenv(CGROUP_ENV, str(tmp_path))
    cgroup, reason = make_cgroup(100, 10)
    assert cgroup is not None and cgroup.version == 2, reason
    (d,) = cgroup.dirs
    assert d.parent == tmp_path and d.name.startswith("vf-sandbox-")
    assert (tmp_path / "cgroup.subtree_control").read_text() == "+memory +pids"
    assert (d / "memory.max").read_text() == str(100 << 20)
    assert (d / "pids.max").read_text() == "12"  # the code's 10, the waiting process and init
    assert cgroup.procs == [str(d / "cgroup.procs")]
    (tmp_path / "cgroup.controllers").write_text("cpu io\n")
    assert make_cgroup(DEFAULTS.memory_mb, DEFAULTS.max_processes) == (None, f"{tmp_path}: memory and pids controllers not available in cgroup v2")
    monkeypatch.setenv(CGROUP_ENV, "off")
    assert make_cgroup(DEFAULTS.memory_mb, DEFAULTS.max_processes) == (None, f"{CGROUP_ENV}=off")
