"""What a first-time user sees: progress in a CI log, the -n cap, a clean scripted server, a working docs snippet."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from verifiers.testing import ScriptedServer, ServerScript

from .conftest import REPO, cli_env, vf_eval_cmd

pytestmark = pytest.mark.usefixtures("importable_envs")


def test_plain_progress_lines_appear_while_the_run_goes_and_n_is_capped(tmp_path: Path) -> None:
    """stderr is a pipe here (as in CI): no live display, but a plain line every --progress-every seconds."""
    with ScriptedServer(ServerScript(latency_s=0.1)) as srv:
        proc = subprocess.Popen(
            [*vf_eval_cmd(), "vf-eval-test-echo", "-b", srv.base_url, "-n", "500", "-r", "2", "-c", "1",
             "--progress-every", "0.3"],
            cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert proc.stderr is not None
        seen_while_running: list[str] = []
        lines: list[str] = []
        for line in proc.stderr:
            lines.append(line)
            if line.startswith("progress: ") and proc.poll() is None:
                seen_while_running.append(line)
        out, _ = proc.communicate(timeout=60)
    err = "".join(lines)
    assert proc.returncode == 0, err
    assert "note: -n 500 asked for more examples than the eval split has; evaluating all 6" in err
    assert len(seen_while_running) >= 2, err  # during the run, not only at the end
    done = [re.search(r"^progress: (\d+)/12 rollouts", s) for s in seen_while_running]
    counts = [int(m.group(1)) for m in done if m is not None]
    assert len(counts) == len(done) and counts == sorted(counts) and counts[0] < counts[-1]
    assert re.search(r"reward mean [\d.]+, errors 0, [\d.]+ rollouts/s, ETA \d+ s", seen_while_running[-1])
    assert "\x1b[" not in err  # no terminal escape codes in a log
    assert "12 (6 examples, r=2)" in out  # the summary of every example


def test_scripted_server_module_runs_without_a_runpy_warning() -> None:
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "verifiers.testing.server", "--port", "0", "--max-lifetime-s", "0.3"],
        cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.startswith("LISTENING "), proc.stderr
    assert "Warning" not in proc.stderr, proc.stderr
    assert time.monotonic() - started < 30


def _python_blocks(markdown: str, heading: str) -> list[str]:
    section = markdown.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_testing_snippet_in_docs_environments_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The "Testing an environment" test file of docs/environments.md, against its single-turn example."""
    docs = (REPO / "docs" / "environments.md").read_text()
    (env_code,) = _python_blocks(docs, "Single turn")
    (test_code,) = _python_blocks(docs, "Testing an environment")
    (tmp_path / "my_env.py").write_text(env_code)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_env", raising=False)
    namespace: dict[str, object] = {"__name__": "test_my_env"}
    exec(compile(test_code, "docs/environments.md", "exec"), namespace)
    namespace["test_conforms"]()  # type: ignore[operator]
    solved = namespace["test_solves"]()  # type: ignore[operator]
    assert solved is None  # a plain test now (the snippet runs under plain pytest, no asyncio plugin needed)
