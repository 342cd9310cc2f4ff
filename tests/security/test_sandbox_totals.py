"""The sandbox's filesystem line and totals: a read-only host, hidden caller directories, a private
size-limited /tmp, and memory / process limits for the whole process tree.

Each attack (`sandbox_fs_attacks.py`) runs in its own driver inside a PID namespace this test
creates (`unshare --pid --fork --mount-proc`): whatever the attack forks or signals stays in that
namespace, never reaches the machine. Every test here was run against the sandbox before this
line existed (verifiers/tools/sandbox.py at b96b452) and failed there.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from verifiers.tools.sandbox import run_python_sync

ATTACKS = Path(__file__).with_name("sandbox_fs_attacks.py")
CANNOT = 77  # as_user.py: a needed file's own mode keeps the other user out
CGROUP_ENV = "VF_SANDBOX_CGROUP"  # the documented knob: off, auto, or a cgroup v2 directory



@pytest.fixture(scope="module")
def available(pid_namespace_problem: str | None) -> dict[str, bool]:
    """Which protections this machine gives a plain run (a run reports it; tests needing one skip)."""
    reason = pid_namespace_problem
    if reason:
        pytest.skip(reason)
    result = run_python_sync("pass")
    isolation = getattr(result, "isolation", None)
    fields = ("namespaces", "readonly_fs", "private_tmp", "cgroup")
    if isolation is None:  # a sandbox that does not report each protection is taken at its word
        return dict.fromkeys(fields, result.isolated)
    return {k: getattr(isolation, k) for k in fields}


@pytest.fixture
def workdir() -> Iterator[Path]:
    # Not pytest's tmp_path: the unprivileged-fallback test runs the driver as another user. Not under
    # /tmp where there is /var/tmp: the run's private /tmp would hide it whole, not test the hiding.
    base = "/var/tmp" if os.path.isdir("/var/tmp") and os.access("/var/tmp", os.W_OK) else None
    path = Path(tempfile.mkdtemp(prefix="vf-fs-attack-", dir=base))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _env(cgroup: str | None) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    env.pop(CGROUP_ENV, None)
    if cgroup is not None:
        env[CGROUP_ENV] = cgroup
    return env


def attack(name: str, workdir: Path, *, isolation: str = "auto", cgroup: str | None = None,
           runner: Callable[[list[str]], list[str]] | None = None, driver: Path = ATTACKS,
           pythonpath: Sequence[str] = ()) -> dict[str, Any]:
    """Run one attack's driver in a PID namespace of its own (as another user through `runner`)."""
    env = _env(cgroup)
    env["PYTHONPATH"] = os.pathsep.join([*pythonpath, env["PYTHONPATH"]])
    cmd = [sys.executable, str(driver), name, str(workdir), isolation]
    cmd = runner(cmd) if runner is not None else ["unshare", "--pid", "--fork", "--mount-proc", *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    if runner is not None and proc.returncode == CANNOT and "as_user: cannot be arranged" in proc.stderr:
        pytest.skip(proc.stderr.strip().splitlines()[-1])  # a checkout made under umask 077
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0 and lines, f"the attack driver died (rc {proc.returncode}): {proc.stderr[-3000:]}"
    return json.loads(lines[-1])


def need(available: dict[str, bool], *names: str) -> None:
    missing = [n for n in names if not available[n]]
    if missing:
        pytest.skip(f"this machine does not give the sandbox {missing}")


def test_the_callers_venv_and_cwd_are_not_writable(available: dict[str, bool], workdir: Path) -> None:
    need(available, "namespaces", "readonly_fs")
    out = attack("venv", workdir)
    assert not out["hook_planted"], out["run"]["stdout"]
    assert out["notes_after"] == "caller data\n"
    assert not out["planted_in_cwd"]
    assert "wrote" not in out["run"]["stdout"] and out["run"]["stdout"].count("refused") == 3


def test_the_callers_cwd_and_output_directory_are_not_visible(available: dict[str, bool], workdir: Path) -> None:
    need(available, "namespaces", "readonly_fs")
    out = attack("hidden", workdir)
    lines = out["run"]["stdout"].splitlines()
    assert [line.rsplit(" ", 1)[1] for line in lines if line.startswith("list")] == ["[]", "[]"]
    assert not any(line.startswith(("read", "wrote")) for line in lines), lines
    assert out["results_after"] == '{"reward": 1.0}\n'


def test_only_a_minimal_dev_is_visible(available: dict[str, bool], workdir: Path) -> None:
    need(available, "namespaces", "readonly_fs")
    listing = set(ast.literal_eval(attack("devices", workdir)["run"]["stdout"]))
    assert listing <= {"fd", "full", "null", "random", "shm", "stderr", "stdin", "stdout", "urandom", "zero"}, listing


def test_filling_the_work_directory_stops_at_disk_mb(available: dict[str, bool], workdir: Path) -> None:
    need(available, "namespaces", "private_tmp")
    out = attack("fill", workdir)
    run = out["run"]
    written = int(run["stdout"].split("written ")[1].split()[0])
    assert written <= 8 << 20, run["stdout"]  # 32 MB attempted
    assert "host write refused" in run["stdout"] and not out["host_file"]
    assert run.get("disk_full") and "No space left on device" in run["stderr"]
    assert "[disk full" in run["tool_output"]


def test_a_fork_bomb_is_stopped_by_the_process_total(available: dict[str, bool], workdir: Path) -> None:
    need(available, "namespaces", "cgroup")
    run = attack("forkbomb", workdir)["run"]
    processes = run["stdout"].count("p") + run["stdout"].count("e")
    assert 1 <= processes <= 16, run["stdout"]  # 128 without a total
    assert "e" in run["stdout"] and run.get("processes_exceeded")


def test_a_forking_memory_hog_is_stopped_by_the_memory_total(available: dict[str, bool], workdir: Path) -> None:
    need(available, "namespaces", "cgroup")
    run = attack("memhog", workdir)["run"]
    done = sum(line.startswith("done ") for line in run["stdout"].splitlines())
    assert done * 48 <= 160, run["stdout"]  # five children held 240 MB together without a total
    assert run["memory_exceeded"]


def test_the_result_reports_what_the_run_had(available: dict[str, bool], workdir: Path) -> None:
    fields = ("namespaces", "readonly_fs", "private_tmp", "cgroup")
    for cgroup, isolation in ((None, "auto"), ("off", "auto"), (None, "off")):
        run = attack("report", workdir, isolation=isolation, cgroup=cgroup)["run"]
        seen = json.loads(run["stdout"])
        assert "isolation" in run, "the result does not say which protections the run had"
        assert {k: run["isolation"][k] for k in fields} == seen, (cgroup, isolation, run["isolation"])
        assert run["isolated"] == all(seen.values())
        if cgroup == "off":
            assert not run["isolation"]["cgroup"] and CGROUP_ENV in run["isolation"]["reasons"]["cgroup"]
        if isolation == "off":
            assert not (seen["namespaces"] or seen["readonly_fs"] or seen["private_tmp"])


def test_require_refuses_without_a_cgroup_and_runs_nothing(available: dict[str, bool], workdir: Path) -> None:
    out = attack("require", workdir, isolation="require", cgroup="off")
    assert out["error"] and out["error"].startswith("ConfigError"), out
    assert "cgroup" in out["error"] and CGROUP_ENV in out["error"]
    assert not out["code_ran"]
    if all(available.values()):  # and runs when everything is there
        out = attack("require", workdir, isolation="require")
        assert out["error"] is None and out["code_ran"] and out["run"]["isolated"], out


def test_without_a_cgroup_an_unprivileged_run_caps_processes_in_its_user_namespace(
    workdir: Path, pid_namespace_problem: str | None, request: pytest.FixtureRequest
) -> None:
    """The fallback: no writable cgroup (a user other than root), RLIMIT_NPROC in the run's own user
    namespace counts only the run's processes. As root this test runs the driver as nobody, with the
    checkout, the virtualenv and the interpreter reachable wherever they are (`as_user.py`)."""
    reason = pid_namespace_problem
    if reason:
        pytest.skip(reason)
    runner = None
    if os.geteuid() == 0:
        as_nobody = request.getfixturevalue("as_nobody")
        needed = [str(ATTACKS), str(workdir)]
        runner = lambda cmd: as_nobody(cmd, needed)  # noqa: E731
    out = attack("forkbomb_default_limits", workdir, cgroup="off", runner=runner)
    run = out["run"]
    processes = run["stdout"].count("p") + run["stdout"].count("e")
    if processes == 128 and not run.get("isolation", {}).get("namespaces", True):
        pytest.skip(f"no unprivileged user namespaces here: {run['isolation']['reasons']}")
    assert out["driver"]["uid"] != 0
    assert 1 <= processes <= 64 and "e" in run["stdout"], run["stdout"]  # the default max_processes
    assert not run["isolation"]["cgroup"] and not run["isolated"]
    assert run["isolation"]["namespaces"] and run["isolation"]["readonly_fs"] and run["isolation"]["private_tmp"]


def test_the_unprivileged_driver_runs_from_a_checkout_in_a_private_directory(
    as_nobody: Callable[..., list[str]], workdir: Path
) -> None:
    """Issue 42: from a clone under ``mktemp -d`` (mode 0700) the driver run as nobody could not open
    its own script. A copy of the driver and of ``verifiers`` in a fresh 0700 directory: as nobody
    with nothing made reachable it dies as it did; made reachable, it runs the sandbox from there.
    A file only its owner may read is refused up front, named (the test that needs it then skips)."""
    import verifiers

    private = Path(tempfile.mkdtemp(prefix="vf-private-"))  # mode 0700, under /tmp: what mktemp -d makes
    try:
        assert private.stat().st_mode & 0o777 == 0o700
        repo = private / "repo"
        shutil.copytree(Path(verifiers.__file__).parent, repo / "verifiers",
                        ignore=shutil.ignore_patterns("__pycache__"))
        driver = repo / "tests" / "security" / ATTACKS.name
        driver.parent.mkdir(parents=True)
        shutil.copy(ATTACKS, driver)

        def run_as_nobody(needed: list[str]) -> dict[str, Any]:
            return attack("report", workdir, cgroup="off", driver=driver, pythonpath=[str(repo)],
                          runner=lambda cmd: as_nobody(cmd, needed))

        with pytest.raises(AssertionError, match=r"can't open file .*sandbox_fs_attacks\.py.*Permission denied"):
            run_as_nobody([])
        out = run_as_nobody([str(driver), str(repo), str(workdir)])
        driver.chmod(0o600)  # what no mount can fix (a clone made under umask 077): refused, with the file named
        refused = subprocess.run(as_nobody([sys.executable, str(driver)], [str(driver)]), capture_output=True,
                                 text=True, timeout=60)
        assert refused.returncode == CANNOT and f"may not read {driver} (mode 0600" in refused.stderr, refused
    finally:
        shutil.rmtree(private)
    assert out["driver"] == {"uid": 65534, "verifiers": str(repo / "verifiers" / "__init__.py")}, out["driver"]
    run = out["run"]
    assert run["exit_code"] == 0 and json.loads(run["stdout"])["namespaces"] == run["isolation"]["namespaces"], run
