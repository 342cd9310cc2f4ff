"""AgentEnv: train and evaluate an unmodified agent program through the interception gateway.

Each rollout runs the program (any language, an OpenAI or Anthropic SDK) as a subprocess in a
fresh working directory holding ``TASK.md``. Its environment points ``OPENAI_BASE_URL`` and
``ANTHROPIC_BASE_URL`` at a gateway session, so every model call it makes is answered by the
environment's client (the trainer's engine, vf-serve, vLLM, a hosted API) and recorded with
its token ids. The rubric then scores what the program did: the first call's prompt, the last
reply, ``state["agent"]`` (exit code, output tails, the calls) and the files in ``state["workdir"]``.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from verifiers.envs.agent_isolation import ISOLATION_PROCESSES, Isolation, run_with_isolation, will_isolate
from verifiers.envs.agent_program import ProgramRun, minimal_env
from verifiers.envs.environment import Environment
from verifiers.errors import AgentCrashedError, AgentError, AgentNoCallsError, ConfigError
from verifiers.gateway import GatewayCall, Session, SessionLimits, get_gateway
from verifiers.tools.sandbox_cgroup import CGROUP_ENV, Cgroup, make_cgroup
from verifiers.types import Info, Messages, SamplingArgs, State, Usage

RESERVED_VARS = ("OPENAI_BASE_URL", "OPENAI_API_BASE", "OPENAI_API_KEY", "OPENAI_MODEL", "ANTHROPIC_BASE_URL",
                 "ANTHROPIC_API_KEY", "VF_TASK", "VF_PROMPT", "VF_INFO", "HOME")


def task_text(prompt: Messages) -> str:
    """The task as text: the prompt itself, or the last user message of a chat prompt."""
    if isinstance(prompt, str):
        return prompt
    for message in reversed(prompt):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            return "" if content is None else str(content)
    return ""


def _cgroup_refusal(why: str) -> str:
    return (f"AgentEnv(memory_mb=..., max_processes=...): the caps need a cgroup for each run, and none can be made "
            f"here: {why}. Run as root, or give this user a delegated cgroup v2 with the memory and pids "
            f"controllers (e.g. a systemd unit with Delegate=yes) and name it with {CGROUP_ENV}=/sys/fs/cgroup/<path>; "
            "or leave memory_mb and max_processes unset to run the program without caps.")


def _probe_cgroup(memory_mb: int | None, max_processes: int | None) -> None:
    """Make and remove one cgroup now, so that caps that cannot be applied fail at construction."""
    cgroup, why = make_cgroup(memory_mb, max_processes)
    if cgroup is None:
        raise ConfigError(_cgroup_refusal(why))
    for d in cgroup.dirs:  # fresh and empty: rmdir removes it
        d.rmdir()


def _completion(calls: list[GatewayCall]) -> tuple[list[dict[str, Any]] | None, list[dict[str, Any]]]:
    """The first answered call's prompt, and what followed it up to the last reply.

    When the last call's messages extend the first prompt (a linear history), the completion
    is everything after that prompt plus the last reply, as a MultiTurnEnv's would be;
    otherwise (the program rewrote its history) it is the last reply alone.
    """
    answered = [c for c in sorted(calls, key=lambda c: c.seq) if c.reply is not None]
    if not answered:
        return None, []
    first, last = answered[0], answered[-1]
    prompt = first.messages
    if last.messages[: len(prompt)] == prompt:
        return prompt, [*last.messages[len(prompt):], last.reply]  # type: ignore[list-item]
    return prompt, [last.reply]  # type: ignore[list-item]


class AgentEnv(Environment):
    """Runs ``command`` once per rollout, pointed at a gateway session; scores with ``rubric``.

    ``command`` is an argv list (or a string split like a shell would). ``env`` adds variables
    to the program's minimal environment; ``files`` maps relative paths to contents written to
    the working directory before the program starts. ``timeout_s`` bounds one run (the whole
    process tree is ended); ``max_calls`` / ``max_tokens`` bound its model use; ``tokenizer``
    (the served policy's; the trainer passes its own) makes later calls token-exact. A crash, a
    non-zero exit, a timeout or a run without model calls is recorded on the rollout, never
    raised out of an evaluation or a training run.

    Nothing the program starts outlives its rollout: on Linux it runs under a subreaper launcher
    (`verifiers.envs.agent_reaper`) that ends every process it started, a ``setsid`` daemon or the
    orphan of a double fork included, when it exits, times out or the rollout is cancelled.
    ``memory_mb`` / ``max_processes`` cap the memory (no swap) and the number of processes (threads
    count) of its whole process tree with a cgroup of its own per rollout (as the sandbox does; an
    isolated run's namespace shares them, its pids cap is ``max_processes`` + `ISOLATION_PROCESSES`;
    ``state["agent"]["memory_exceeded"]`` / ``["processes_exceeded"]`` say when a cap was hit);
    where no cgroup can be made (no root, no delegated cgroup v2) they raise a `ConfigError`.

    ``isolation``: ``"none"`` runs the program as a plain process; ``"require"`` runs it in
    its own PID, mount, IPC and network namespaces without capabilities, the gateway its only
    network peer (docs/security.md), or records an ``AgentIsolationError`` where the machine
    cannot; ``"auto"`` isolates where possible and otherwise warns once and runs it unisolated.
    """

    def __init__(
        self,
        command: Sequence[str] | str,
        dataset: Any = None,
        eval_dataset: Any = None,
        rubric: Any = None,
        *,
        env: Mapping[str, str] | None = None,
        files: Mapping[str, str | bytes] | None = None,
        timeout_s: float = 300.0,
        max_calls: int | None = 64,
        max_tokens: int | None = None,
        isolation: Isolation = "none",
        memory_mb: int | None = None,
        max_processes: int | None = None,
        max_output_chars: int = 8000,
        token_prompt: Any = None,
        tokenizer: Any = None,
        **kwargs: Any,
    ) -> None:
        if kwargs.get("message_type", "chat") != "chat":
            raise ConfigError("AgentEnv speaks chat completions: leave message_type as 'chat'")
        super().__init__(dataset=dataset, eval_dataset=eval_dataset, rubric=rubric, **kwargs)
        argv = shlex.split(command) if isinstance(command, str) else [str(a) for a in command]
        if not argv:
            raise ConfigError("AgentEnv needs a command: e.g. command=[sys.executable, 'agent.py']")
        clash = sorted(set(env or {}) & set(RESERVED_VARS))
        if clash:
            raise ConfigError(f"env= may not set {', '.join(clash)}: AgentEnv sets them for each rollout")
        if isolation not in ("none", "auto", "require"):
            raise ConfigError(f"isolation must be 'none', 'auto' or 'require', got {isolation!r}")
        if timeout_s <= 0:
            raise ConfigError(f"timeout_s must be > 0, got {timeout_s}")
        for name, cap in (("memory_mb", memory_mb), ("max_processes", max_processes)):
            if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
                raise ConfigError(f"{name} must be a positive integer (or None for no cap), got {cap!r}")
        if memory_mb is not None or max_processes is not None:
            _probe_cgroup(memory_mb, max_processes)
        self.command = argv
        self.program_env = dict(env or {})
        self.files = dict(files or {})
        self.timeout_s = timeout_s
        self.limits = SessionLimits(max_calls=max_calls, max_tokens=max_tokens)
        self.isolation: Isolation = isolation
        self.memory_mb = memory_mb
        self.max_processes = max_processes
        self.max_output_chars = max_output_chars
        self.token_prompt = token_prompt
        if tokenizer is not None:
            self.use_tokenizer(tokenizer)

    # -- one rollout ------------------------------------------------------------------------
    def _workdir(self, prompt: Messages) -> Path:
        workdir = Path(tempfile.mkdtemp(prefix="vf-agent-"))
        (workdir / "TASK.md").write_text(task_text(prompt) + "\n")
        for rel, content in self.files.items():
            target = (workdir / rel).resolve()
            if workdir.resolve() not in target.parents:
                raise ConfigError(f"files: {rel!r} points outside the working directory")
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                target.write_bytes(content)
            else:
                target.write_text(content)
        return workdir

    def _program_env(self, session: Session, workdir: Path, prompt: Messages, info: Info) -> dict[str, str]:
        extra = {
            **self.program_env,
            **session.env_vars(),
            "VF_TASK": task_text(prompt),
            "VF_PROMPT": json.dumps(prompt, ensure_ascii=False, default=str),
            "VF_INFO": json.dumps(info, ensure_ascii=False, default=str),
        }
        return minimal_env(str(workdir), extra)

    async def run_agent(self, command: list[str], workdir: Path, env: dict[str, str]) -> ProgramRun:
        """Run the program once, isolated as ``isolation`` says (see `verifiers.envs.agent_isolation`),
        in a cgroup of its own when ``memory_mb`` or ``max_processes`` is set."""
        cgroup: Cgroup | None = None
        if self.memory_mb is not None or self.max_processes is not None:
            reserved = ISOLATION_PROCESSES if will_isolate(self.isolation) else 0  # the namespace is in it too
            cgroup, why = make_cgroup(self.memory_mb, self.max_processes, reserved=reserved)
            if cgroup is None:
                raise AgentError(_cgroup_refusal(why))
        try:
            run = await run_with_isolation(self.isolation, command, str(workdir), env, self.timeout_s,
                                           get_gateway().unix_path, self.max_output_chars,
                                           cgroup_procs=cgroup.procs if cgroup is not None else ())
            if cgroup is not None:
                run = run.model_copy(update={"memory_exceeded": cgroup.oom_killed(),
                                             "processes_exceeded": cgroup.pids_exceeded()})
            return run
        finally:
            if cgroup is not None:  # kills what is left in it (nothing, after the launcher) and removes it
                await asyncio.shield(cgroup.remove())

    async def rollout(
        self,
        client: Any,
        model: str,
        prompt: Messages,
        answer: str = "",
        task: str = "default",
        info: Info | None = None,
        sampling_args: SamplingArgs | None = None,
        state: State | None = None,
        **kwargs: Any,
    ) -> tuple[Messages, State]:
        state = state if state is not None else {}
        info = info if info is not None else {}
        state.update(prompt=prompt, completion=[], answer=answer, task=task, info=info, turn=0, responses=[],
                     tokens=[], usage=Usage(), stop_reason=None, is_truncated=False)
        gateway = get_gateway()
        session = gateway.open_session(client, model, self.merge_sampling_args(sampling_args), self.limits,
                                       token_prompt=self.token_prompt)
        state["agent_session"] = session
        workdir = self._workdir(prompt)
        state["workdir"] = str(workdir)
        try:
            run = await self.run_agent(self.command, workdir, self._program_env(session, workdir, prompt, info))
        finally:
            gateway.close_session(session)
            self._record(state, session)
        state["agent"]["run"] = run
        state["agent"].update(exit_code=run.exit_code, timed_out=run.timed_out, stdout=run.stdout, stderr=run.stderr,
                              duration_s=run.duration_s, isolated=run.isolated,
                              memory_exceeded=run.memory_exceeded, processes_exceeded=run.processes_exceeded)
        return state["completion"], self._outcome(state, session, run)

    def _record(self, state: State, session: Session) -> None:
        calls = sorted(session.calls, key=lambda c: c.seq)
        first_prompt, completion = _completion(calls)
        if first_prompt is not None:  # the rollout's prompt is what the model saw, not the row
            state["prompt"] = state["rollout_prompt"] = first_prompt
        state["completion"] = completion
        state["tokens"] = session.turn_tokens()
        state["turn"] = sum(1 for c in calls if c.reply is not None)
        state["usage"] = Usage(
            prompt_tokens=sum(len(t.prompt_ids) for t in state["tokens"]),
            completion_tokens=sum(len(t.completion_ids) for t in state["tokens"]),
        )
        state["agent"] = {"calls": calls, "num_calls": len(calls), "token_in_calls": sum(c.token_in for c in calls),
                          "exit_code": None, "timed_out": False, "stdout": "", "stderr": ""}
        state["is_truncated"] = session.truncated or bool(calls and calls[-1].finish_reason == "length")
        state["stop_reason"] = session.stop_reason

    def _outcome(self, state: State, session: Session, run: ProgramRun) -> State:
        """Stop reason and, for a failed program, the typed error (raised: the engine records it)."""
        answered = state["turn"]
        if run.timed_out:
            state["stop_reason"], state["is_truncated"] = "timeout", True
            return state
        if session.stop_reason is not None:  # the gateway ended it: context or budget
            return state
        tail = run.stderr[-1500:].strip()
        if answered == 0:
            state["stop_reason"] = "error"
            if run.exit_code:
                raise AgentCrashedError(f"the agent program exited with code {run.exit_code} before any model call"
                                        + (f"; stderr ends with: {tail}" if tail else ""))
            raise AgentNoCallsError("the agent program exited without calling the model "
                                    "(does it read OPENAI_BASE_URL / OPENAI_API_KEY?)")
        if run.exit_code:
            state["stop_reason"] = "error"
            raise AgentCrashedError(f"the agent program exited with code {run.exit_code} after {answered} model "
                                    "call(s)" + (f"; stderr ends with: {tail}" if tail else ""))
        state["stop_reason"] = "completed"
        return state

    def use_tokenizer(self, tokenizer: Any, max_model_len: int | None = None) -> None:
        """Send a program's calls that extend an earlier call as that call's exact ids plus the new
        tail (token-in, `verifiers.gateway.token_in`): re-tokenising sampled text can then never
        drift. ``tokenizer`` is the served policy's; the trainer passes it. A string names the
        model it comes from (a directory, a ``.gguf`` file or a registry name such as
        ``smollm2-135m-instruct``: what ``vf-serve`` was given), so that ``vf-eval -a`` can set it.
        A copy is kept: a fast tokenizer used from two threads at once raises."""
        import copy

        from verifiers.gateway import token_prompt_for

        if isinstance(tokenizer, str | Path):
            tokenizer = _load_tokenizer(str(tokenizer))
        self.token_prompt = token_prompt_for(copy.deepcopy(tokenizer), max_model_len=max_model_len)

    async def cleanup_state(self, state: State) -> None:
        session = state.get("agent_session")
        if isinstance(session, Session) and not session.closed:
            get_gateway().close_session(session)

    async def release_state(self, state: State) -> None:
        """After scoring: the working directory goes (reward functions may read it until then)."""
        workdir = state.get("workdir")
        if workdir:
            shutil.rmtree(workdir, ignore_errors=True)


def _load_tokenizer(spec: str) -> Any:
    """The tokenizer of the model ``spec`` names, resolved as ``vf-serve`` resolves it."""
    from verifiers.install_hint import install_command

    try:
        from transformers import AutoTokenizer
    except ImportError as exc:
        raise ConfigError(f"AgentEnv(tokenizer={spec!r}) loads the tokenizer with transformers, which is not "
                          f"installed: {install_command('train')} (or pass a tokenizer object)") from exc
    from verifiers.models.source import resolve_model

    return AutoTokenizer.from_pretrained(str(resolve_model(spec)))
