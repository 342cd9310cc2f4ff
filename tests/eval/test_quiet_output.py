"""vf-eval's output is its own: no datasets progress bars from an environment's data loading."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from verifiers.testing import ScriptedServer

ENV_MODULE = '''
import datasets
import verifiers as vf

def load_environment(**kwargs):
    rows = datasets.Dataset.from_list([{"question": f"q{i}", "answer": "a"} for i in range(50)])
    rows = rows.map(lambda r: {"question": r["question"].upper()})  # draws "Map: 100%" by default
    return vf.SingleTurnEnv(dataset=rows, rubric=vf.Rubric(funcs=[lambda **_: 1.0]))
'''


def _eval(tmp_path: Path, base_url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "noisy_data_env.py").write_text(ENV_MODULE)
    return subprocess.run(
        [sys.executable, "-m", "verifiers.cli.eval", "noisy-data-env", "-b", base_url, "-m", "m", "-n", "2",
         "-r", "1", "--no-progress", *extra],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{tmp_path}:{Path(__file__).parents[2]}", "HOME": str(tmp_path)},
    )


def test_no_datasets_progress_bars_unless_verbose(tmp_path: Path) -> None:
    with ScriptedServer() as srv:
        quiet = _eval(tmp_path, srv.base_url)
        loud = _eval(tmp_path, srv.base_url, "-v")
    assert quiet.returncode == 0, quiet.stderr
    assert "Map" not in quiet.stderr and "%|" not in quiet.stderr
    assert loud.returncode == 0 and "Map" in loud.stderr  # the bars exist: -v keeps them


def test_library_future_warnings_are_hidden_but_ours_are_not() -> None:
    code = ("import warnings\nfrom verifiers.cli.quiet import quiet_libraries\nquiet_libraries()\n"
            "warnings.warn_explicit('old api', FutureWarning, 'x.py', 1, module='transformers.utils.generic')\n"
            "warnings.warn_explicit('your env', FutureWarning, 'y.py', 1, module='my_env')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "old api" not in out.stderr and "your env" in out.stderr
