"""SandboxEnv (0.1.x path ``verifiers.envs.sandbox_env``): a ``bash`` tool in a per-rollout sandbox.

Upstream ran each rollout in a remote container (prime-cli). Here each rollout gets a
private working directory on this machine and every command runs through the local
sandbox (`verifiers.tools.sandbox`): a separate process group with CPU, memory,
file-size and wall-time limits, no network, and a minimal environment. Files persist
across the commands of one rollout; the directory is deleted when the rollout ends,
also after errors or cancellation (`cleanup_state`). Container-only arguments
(``docker_image``, ``start_command``, ``gpu_count``, ``team_id``, ``advanced_configs``)
have no local meaning and are ignored with a warning.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from typing import Any

from verifiers.envs.tool_env import StatefulToolEnv
from verifiers.tools.sandbox import SandboxLimits, SandboxResult, run_python
from verifiers.types import Messages, State

__all__ = ["SandboxEnv"]

logger = logging.getLogger(__name__)

_DEFAULT_IMAGE = "python:3.11-slim"
_DEFAULT_START = "tail -f /dev/null"

# Runs inside the sandbox process: the limits apply to bash and everything it starts.
_BASH_RUNNER = """
import json, os, subprocess, sys
req = json.loads(sys.stdin.read())
os.chdir(req["dir"])
os.environ.update(req["env"])
proc = subprocess.run(["bash", "-c", req["command"]], stdin=subprocess.DEVNULL, capture_output=True)
sys.stdout.write(proc.stdout.decode("utf-8", "replace"))
sys.stderr.write(proc.stderr.decode("utf-8", "replace"))
sys.exit(proc.returncode)
"""


class SandboxEnv(StatefulToolEnv):
    """StatefulToolEnv with a ``bash(command)`` tool running in the rollout's own sandbox directory."""

    def __init__(
        self,
        sandbox_name: str = "sandbox-env",
        docker_image: str = _DEFAULT_IMAGE,
        start_command: str = _DEFAULT_START,
        cpu_cores: int = 1,
        memory_gb: int = 2,
        disk_size_gb: int = 5,
        gpu_count: int = 0,
        timeout_minutes: int = 60,
        environment_vars: dict[str, str] | None = None,
        team_id: str | None = None,
        advanced_configs: Any = None,
        limits: SandboxLimits | None = None,
        **kwargs: Any,
    ) -> None:
        ignored = {
            "docker_image": docker_image != _DEFAULT_IMAGE,
            "start_command": start_command != _DEFAULT_START,
            "gpu_count": bool(gpu_count),
            "team_id": team_id is not None,
            "advanced_configs": advanced_configs is not None,
        }
        if any(ignored.values()):
            names = sorted(k for k, v in ignored.items() if v)
            logger.warning("%s runs tools in the local sandbox; ignoring %s", type(self).__name__, names)
        super().__init__(**kwargs)
        self.sandbox_name = sandbox_name
        self.environment_vars = dict(environment_vars or {})
        self.limits = (
            limits
            if limits is not None
            else SandboxLimits(memory_mb=memory_gb * 1024, wall_time_s=30, cpu_time_s=30)
        )
        self.active_sandboxes: set[str] = set()
        self.add_tool(self.bash, args_to_skip=["sandbox_id"])

    async def setup_state(self, state: State, **kwargs: Any) -> State:
        """Create the rollout's sandbox directory; its path is ``state["sandbox_id"]``."""
        sandbox_id = tempfile.mkdtemp(prefix=f"vf-{self.sandbox_name}-")
        self.active_sandboxes.add(sandbox_id)
        state["sandbox_id"] = sandbox_id
        return await super().setup_state(state, **kwargs)

    def update_tool_args(
        self, tool_name: str, tool_args: dict[str, Any], messages: Messages, state: State, **kwargs: Any
    ) -> dict[str, Any]:
        if tool_name == "bash":
            return {**tool_args, "sandbox_id": state["sandbox_id"]}
        return tool_args

    async def run_in_sandbox(self, code: str, sandbox_id: str, payload: dict[str, Any]) -> SandboxResult:
        """Run Python ``code`` under the limits with ``payload`` (plus the sandbox dir and env) on stdin."""
        request = {"dir": sandbox_id, "env": self.environment_vars, **payload}
        # The rollout's directory is the one host directory the code may write (it persists between calls).
        limits = self.limits.model_copy(update={"writable_paths": [*self.limits.writable_paths, sandbox_id]})
        return await run_python(code, limits, stdin=json.dumps(request))

    async def bash(self, command: str, sandbox_id: str) -> str:
        """Execute `command` inside persistent sandbox container."""
        result = await self.run_in_sandbox(_BASH_RUNNER, sandbox_id, {"command": command})
        stdout, stderr = result.stdout.strip(), result.stderr.strip()
        parts = [stdout] if stdout else []
        if stderr:
            parts.append(f"stderr:\n{stderr}")
        if result.timed_out or result.cpu_exceeded or result.memory_exceeded or result.disk_full:
            parts.append(result.to_tool_output().splitlines()[-1])
        return "\n".join(parts) or "(no output)"

    async def cleanup_state(self, state: State) -> None:
        """Delete the rollout's sandbox directory (runs after every rollout, also on errors)."""
        await super().cleanup_state(state)
        self._destroy_sandbox(state.pop("sandbox_id", None))

    def _destroy_sandbox(self, sandbox_id: str | None) -> None:
        if sandbox_id is None:
            return
        shutil.rmtree(sandbox_id, ignore_errors=True)
        self.active_sandboxes.discard(sandbox_id)

    def cleanup_sandboxes(self) -> None:
        """Delete every sandbox directory still present (0.1.x name)."""
        for sandbox_id in list(self.active_sandboxes):
            self._destroy_sandbox(sandbox_id)
