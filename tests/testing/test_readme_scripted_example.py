"""The README's example environment against the scripted server, as the README says to run it."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import verifiers as vf

README = Path(__file__).parents[2] / "README.md"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(), flags=re.S)


def _load_environment() -> Any:
    (code,) = [b for b in _blocks("python") if "def load_environment" in b and "SingleTurnEnv" in b]
    namespace: dict[str, Any] = {}
    exec(compile(code.split("env = load_environment()")[0], str(README), "exec"), namespace)
    return namespace["load_environment"]


def _serve(args: list[str]) -> tuple[subprocess.Popen[str], str]:
    args = [a if a != "8000" else "0" for a in args]  # a free port, not the README's 8000
    proc = subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    port = int(proc.stdout.readline().split()[1])
    return proc, f"http://127.0.0.1:{port}/v1"


def _evaluate(base_url: str) -> vf.GenerateOutputs:
    return _load_environment()().evaluate(vf.make_client(base_url, max_retries=0), "my-model", rollouts_per_example=2)


def test_the_scripted_command_in_the_readme_makes_the_example_score_full_reward() -> None:
    (command,) = [b for b in _blocks("bash") if "verifiers.testing.server" in b and "--script-json" in b]
    args = shlex.split(command.replace("\\\n", " "))
    assert args[0] == "python"
    proc, url = _serve(args[1:])
    try:
        out = _evaluate(url)
    finally:
        proc.terminate()
        proc.wait(10)
    assert out.reward == [1.2, 1.2] and out.metrics["exact"] == [1.0, 1.0]


def test_the_default_script_scores_zero_and_its_startup_line_says_why() -> None:
    proc, url = _serve(["-m", "verifiers.testing.server", "--port", "8000"])
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        out = _evaluate(url)
    finally:
        proc.terminate()
        proc.wait(10)
    assert "echoes the last user message" in line and "--script-json" in line
    assert out.reward == [0.0, 0.0]
