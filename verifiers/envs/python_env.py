"""PythonEnv (0.1.x path ``verifiers.envs.python_env``): a ``python`` tool that behaves like a REPL.

As upstream, the model gets one tool, ``python(code)``: the cell's stdout, its stderr
as ``stderr:\\n...``, the traceback of an error, and ``Out[n]: repr(value)`` for a
trailing expression, with variables kept from one call to the next within a rollout.

Upstream kept a Python process alive in a remote container. Here each call runs in
the local sandbox (`SandboxEnv`: limits, no network, the rollout's own directory)
and the REPL's memory is rebuilt by re-running the rollout's earlier cells silently
before the new one. That keeps no process alive between turns (nothing to leak when a
rollout is cancelled) at the price of re-execution: cells with side effects outside
their variables (appending to a file, randomness, clocks) are repeated, and the
sandbox's time limit covers the replay too.
"""

from __future__ import annotations

import json
from typing import Any, TypedDict

from verifiers.envs.sandbox_env import SandboxEnv
from verifiers.types import Messages, State

__all__ = ["PythonEnv", "PythonWorkerState"]

_MARKER = "\n<<vf-python-env-result>>"

# Runs inside the sandbox: replay earlier cells quietly, then run the last one and report it.
_REPL_RUNNER = (
    """
import ast, contextlib, io, json, os, sys, traceback
req = json.loads(sys.stdin.read())
os.chdir(req["dir"])
os.environ.update(req["env"])
ns = {"__name__": "__main__"}

def run(code):
    out, err = io.StringIO(), io.StringIO()
    res = {"status": "ok", "result": None}
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            body = list(ast.parse(code, mode="exec").body)
            tail = body.pop() if body and isinstance(body[-1], ast.Expr) else None
            if body:
                exec(compile(ast.Module(body=body, type_ignores=[]), "<cell>", "exec"), ns, ns)
            if tail is not None:
                value = eval(compile(ast.Expression(tail.value), "<cell>", "eval"), ns, ns)
                if value is not None:
                    res["result"] = repr(value)
    except BaseException:
        res["status"] = "error"
        res["result"] = traceback.format_exc()
    res["stdout"], res["stderr"] = out.getvalue(), err.getvalue()
    return res

cells = req["cells"]
for cell in cells[:-1]:
    run(cell)
result = run(cells[-1])
sys.__stdout__.write("""
    + repr(_MARKER)
    + """ + json.dumps(result))
"""
)


class PythonWorkerState(TypedDict):
    ready: bool
    execution_count: int


class PythonEnv(SandboxEnv):
    """Sandbox environment exposing a persistent Python REPL as the ``python`` tool (no ``bash``)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("sandbox_name", "python-env")
        super().__init__(**kwargs)
        self.add_tool(self.python, args_to_skip=["sandbox_id", "python_state"])
        self.remove_tool("bash")  # omitted from the model's tool list, as upstream

    async def setup_state(self, state: State, **kwargs: Any) -> State:
        state = await super().setup_state(state, **kwargs)
        state["python_env"] = {"ready": False, "execution_count": 0}
        state["python_cells"] = []
        return state

    def update_tool_args(
        self, tool_name: str, tool_args: dict[str, Any], messages: Messages, state: State, **kwargs: Any
    ) -> dict[str, Any]:
        if tool_name != "python":
            return super().update_tool_args(tool_name, tool_args, messages, state, **kwargs)
        # The cell list rides inside python_state so that the tool needs no access to `state`.
        python_state = state["python_env"]
        python_state["cells"] = state["python_cells"]
        return {**tool_args, "sandbox_id": state["sandbox_id"], "python_state": python_state}

    async def python(self, code: str, sandbox_id: str, python_state: PythonWorkerState) -> str:
        """Execute `code` inside persistent Python REPL."""
        cells: list[str] = python_state.setdefault("cells", [])  # type: ignore[typeddict-item]
        cells.append(code)
        python_state["ready"] = True
        result = await self.run_in_sandbox(_REPL_RUNNER, sandbox_id, {"cells": cells})
        raw = result.stdout.rpartition(_MARKER)[2] if _MARKER in result.stdout else ""
        if not raw:
            return f"Error: {result.to_tool_output()}"
        return self._format_response(python_state, json.loads(raw))

    def _format_response(self, python_state: PythonWorkerState, response: dict[str, Any]) -> str:
        python_state["execution_count"] = python_state.get("execution_count", 0) + 1
        count = python_state["execution_count"]
        parts: list[str] = []
        stdout = (response.get("stdout") or "").rstrip()
        if stdout:
            parts.append(stdout)
        stderr = (response.get("stderr") or "").rstrip()
        if stderr:
            parts.append(f"stderr:\n{stderr}")
        value = response.get("result")
        if response.get("status") == "error" and value:
            parts.append(value.rstrip())
        elif response.get("status") == "ok" and value is not None:
            parts.append(f"Out[{count}]: {value}")
        return "\n".join(parts) or "(no output)"
