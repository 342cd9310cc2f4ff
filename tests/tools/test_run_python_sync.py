"""`vf.run_python` is a coroutine; plain code calls `vf.run_python_sync` (exported, documented)."""

from __future__ import annotations

import inspect

import verifiers as vf


def test_plain_code_runs_python_with_the_sync_form() -> None:
    result = vf.run_python_sync("print(6 * 7)")
    assert result.stdout.strip() == "42" and result.exit_code == 0
    assert inspect.iscoroutinefunction(vf.run_python)
    assert "run_python_sync" in (vf.run_python.__doc__ or "")  # the coroutine's docstring points at it
