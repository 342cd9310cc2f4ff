"""`run_eval`: the library behind ``vf-eval``.

Load the environment, pick the examples, build the client (one endpoint or several
round-robin), run the rollouts through the engine and save each finished group at
once. The CLI only parses arguments into an `EvalConfig` and prints the outcome, so
scripts and notebooks get exactly the same behaviour by calling `run_eval`.

Interrupts: SIGINT and SIGTERM cancel the run cleanly (environment cleanup hooks run),
the groups already finished stay saved, and the run is marked ``interrupted`` so
``--resume`` picks it up. Only ``kill -9`` skips that; then the status stays
``running`` and resume still works, because results.jsonl is the source of truth.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from rich.console import Console

from verifiers.clients.openai_client import ChatClient
from verifiers.envs.environment import Environment, run_sync
from verifiers.errors import ConfigError
from verifiers.eval.display import EvalDisplay
from verifiers.eval.endpoints import Endpoint, api_key_for, build_client, resolve_endpoints
from verifiers.eval.preflight import check_base_url, check_endpoints
from verifiers.eval.run_store import (
    RolloutKey,
    RunMetadata,
    RunStatus,
    RunStore,
    find_resumable_run,
    read_results,
    redact_headers,
    versions,
)
from verifiers.rollout.inputs import RolloutInput
from verifiers.rollout.runner import run_rollouts
from verifiers.types import RolloutResult, SamplingArgs

DEFAULT_MODEL = "gpt-4.1-mini"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_OUTPUT_DIR = Path("outputs")


class EvalConfig(BaseModel):
    """Everything ``vf-eval`` can be told. Field names follow the long CLI flags."""

    model_config = ConfigDict(extra="forbid")

    env_id: str
    env_args: dict[str, Any] = Field(default_factory=dict)
    model: str = DEFAULT_MODEL
    """A model name, or an alias from the endpoints registry."""
    base_url: str | None = None
    """None: the alias's base URL, else ``DEFAULT_BASE_URL``."""
    api_key_var: str | None = None
    """Name of the environment variable holding the key. None: the alias's, else OPENAI_API_KEY."""
    endpoints_path: Path | None = None
    num_examples: int = 5
    """-1: every example of the eval split."""
    rollouts_per_example: int = 3
    max_concurrent: int = 32
    """<= 0: no limit."""
    sampling_args: SamplingArgs = Field(default_factory=dict)
    rollout_timeout_s: float | None = None
    """None: the environment's own (often none)."""
    request_timeout_s: float = 600.0
    max_retries: int = 3
    headers: dict[str, str] = Field(default_factory=dict)
    save: bool = False
    output_dir: Path = DEFAULT_OUTPUT_DIR
    """Runs go to ``<output_dir>/evals/<env>--<model>/<run-id>/``."""
    resume: bool | Path = False
    """True: the latest incomplete matching run under output_dir; a path: that run directory."""
    show_progress: bool = True
    progress_every_s: float = 10.0
    """When stderr is not a terminal: one plain progress line this often (<= 0: none)."""
    check_endpoint: bool = True
    """Check the endpoint (reachable, URL, key, model listed) before any rollout; see `verifiers.eval.preflight`."""
    verbose: bool = False

    @property
    def evals_dir(self) -> Path:
        return Path(self.output_dir) / "evals"


class EvalResult(BaseModel):
    """What a finished (or interrupted) evaluation left behind."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    status: RunStatus
    results: list[RolloutResult]
    """Every rollout of the run: on a resumed run also those saved by earlier sessions."""
    ran: int
    """Rollouts finished in this session."""
    run_dir: Path | None = None
    metadata: RunMetadata | None = None
    resumed: bool = False
    duration_s: float = 0.0


def _validate(config: EvalConfig) -> None:
    if config.num_examples == 0 or config.num_examples < -1:
        raise ConfigError(
            f"-n/--num-examples must be a positive number or -1 (all), got {config.num_examples}"
        )
    if config.rollouts_per_example < 1:
        raise ConfigError(f"-r/--rollouts-per-example must be >= 1, got {config.rollouts_per_example}")
    if config.rollout_timeout_s is not None and config.rollout_timeout_s <= 0:
        raise ConfigError(f"--timeout must be > 0 seconds, got {config.rollout_timeout_s}")
    if config.max_retries < 0:
        raise ConfigError(f"--max-retries must be >= 0, got {config.max_retries}")
    if config.progress_every_s < 0:
        raise ConfigError(f"--progress-every must be >= 0 seconds, got {config.progress_every_s}")


def _select_inputs(
    env: Environment, rows: list[dict[str, Any]], rollouts_per_example: int, todo: set[RolloutKey] | None
) -> list[RolloutInput]:
    inputs = env.build_inputs(rows, rollouts_per_example)
    if todo is None:
        return inputs
    return [i for i in inputs if (i.example_id, i.rollout_index) in todo]


def _metadata_for(
    config: EvalConfig,
    env_id: str,
    endpoints: list[Endpoint],
    alias: str | None,
    example_ids: list[int],
    rollout_timeout_s: float | None,
) -> RunMetadata:
    first = endpoints[0]
    return RunMetadata(
        run_id="",
        env_id=env_id,
        env_args=config.env_args,
        model=first.model,
        model_alias=alias,
        base_url=first.base_url,
        endpoints=[e.base_url for e in endpoints],
        api_key_var=first.api_key_var,
        headers=redact_headers(config.headers),
        sampling_args=config.sampling_args,
        num_examples=len(example_ids),
        rollouts_per_example=config.rollouts_per_example,
        example_ids=example_ids,
        max_concurrent=config.max_concurrent,
        rollout_timeout_s=rollout_timeout_s,
        max_retries=config.max_retries,
        versions=versions(),
    )


def _open_store(
    config: EvalConfig, env: Environment, wanted: RunMetadata, console: Console
) -> tuple[RunStore, set[RolloutKey] | None, bool]:
    """Create a run directory, or reopen the one to resume; return it with the keys to run."""
    if len(set(wanted.example_ids)) != len(wanted.example_ids):
        raise ConfigError(
            "the eval examples have duplicate ids (an 'id'/'example_id' column with repeats); saving and "
            "resume identify rollouts by (example_id, rollout_index), so make the ids unique"
        )
    run_dir: Path | None = None
    if isinstance(config.resume, Path):
        run_dir = config.resume
    elif config.resume:
        run_dir = find_resumable_run(config.evals_dir, wanted)
        if run_dir is None:
            console.print("[yellow]--resume: no incomplete run with these settings; starting a new run[/]")
    if run_dir is not None:
        store, todo = RunStore.resume(run_dir, wanted, rerun_whole_groups=env.rubric.has_group_funcs)
        saved = store.metadata.counts.saved
        console.print(
            f"Resuming {run_dir}: {saved} rollouts kept, {len(todo)} to run "
            f"(missing or errored{', whole groups' if env.rubric.has_group_funcs else ''})"
        )
        return store, todo, True
    return RunStore.create(config.evals_dir, wanted), None, False


async def _execute(
    env: Environment,
    client: ChatClient,
    model: str,
    inputs: list[RolloutInput],
    config: EvalConfig,
    rollout_timeout_s: float | None,
    on_group: Callable[[list[RolloutResult]], Any],
    on_rollout: Callable[[RolloutResult], Any],
) -> RunStatus:
    """Run the rollouts; SIGINT/SIGTERM end the run as ``interrupted`` instead of killing it."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    interrupted = False
    installed: list[signal.Signals] = []

    def interrupt() -> None:
        nonlocal interrupted
        interrupted = True
        if task is not None:
            task.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        # Only possible in the main thread of the main interpreter; elsewhere the caller's rules apply.
        with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):
            loop.add_signal_handler(sig, interrupt)
            installed.append(sig)
    try:
        await run_rollouts(
            env,
            client,
            model,
            inputs,
            sampling_args=config.sampling_args,
            max_concurrent=config.max_concurrent,
            rollout_timeout_s=rollout_timeout_s,
            on_group=on_group,
            on_rollout=on_rollout,
        )
        return "complete"
    except asyncio.CancelledError:
        if not interrupted:
            raise
        if task is not None:
            task.uncancel()
        return "interrupted"
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


def _secrets(endpoints: list[Endpoint], headers: dict[str, str]) -> list[str]:
    """Values that must never be written: the API keys in use and credential-like header values."""
    found = {api_key_for(ep)[0] for ep in endpoints if api_key_for(ep)[1]}
    found |= {v for k, v in headers.items() if redact_headers({k: v})[k] != v}
    return sorted((s for s in found if len(s) >= 4), key=len, reverse=True)


def _scrub(group: list[RolloutResult], secrets: list[str]) -> None:
    """Mask secrets that a server echoed into an error message before the rollout is saved."""
    if not secrets:
        return
    for r in group:
        for err in [r.error, *r.scoring_errors]:
            if err is not None:
                for s in secrets:
                    if s in err.message:
                        err.message = err.message.replace(s, "<redacted>")


def run_eval(
    config: EvalConfig,
    *,
    env: Environment | None = None,
    console: Console | None = None,
) -> EvalResult:
    """Evaluate ``config.env_id`` (or the given ``env``) and, with ``save``/``resume``, keep every rollout on disk.

    Rollouts that fail are data (recorded with their error type), not a failed run;
    configuration problems raise `ConfigError` before anything is written.
    """
    console = console if console is not None else Console(stderr=True)
    _validate(config)
    endpoints, alias = resolve_endpoints(
        config.model,
        base_url=config.base_url,
        api_key_var=config.api_key_var,
        endpoints_path=config.endpoints_path,
        default_base_url=DEFAULT_BASE_URL,
    )
    env, rows = _load_rows(config, env, console)
    example_ids = [int(r["example_id"]) for r in rows]
    rollout_timeout_s = (
        config.rollout_timeout_s if config.rollout_timeout_s is not None else env.rollout_timeout_s
    )
    wanted = _metadata_for(config, config.env_id, endpoints, alias, example_ids, rollout_timeout_s)
    _check_endpoints(config, endpoints, console)

    client = build_client(
        endpoints,
        timeout=config.request_timeout_s,
        max_retries=config.max_retries,
        headers=config.headers or None,
    )
    store: RunStore | None = None
    todo: set[RolloutKey] | None = None
    resumed = False
    if config.save or config.resume:
        store, todo, resumed = _open_store(config, env, wanted, console)
    inputs = _select_inputs(env, rows, config.rollouts_per_example, todo)
    console.print(
        f"Evaluating {config.env_id} with {wanted.model}: {len(inputs)} rollouts "
        f"({len(rows)} examples x {config.rollouts_per_example})"
        + (f" -> {store.run_dir}" if store is not None else "")
    )

    session: list[RolloutResult] = []
    started = time.monotonic()
    status, metadata = _run_session(
        config, env, client, wanted.model, inputs, rollout_timeout_s, store, session,
        _secrets(endpoints, config.headers), console,
    )
    if status == "interrupted":
        console.print(f"[yellow]Interrupted: {len(session)} rollouts finished in this session were kept[/]")
    results = read_results(store.run_dir) if store is not None else session
    if store is None:
        results.sort(key=lambda r: (r.example_id, r.rollout_index))
    return EvalResult(
        status=status,
        results=results,
        ran=len(session),
        run_dir=store.run_dir if store is not None else None,
        metadata=metadata,
        resumed=resumed,
        duration_s=metadata.duration_s if metadata is not None else round(time.monotonic() - started, 3),
    )


def _load_rows(
    config: EvalConfig, env: Environment | None, console: Console
) -> tuple[Environment, list[dict[str, Any]]]:
    """The environment (loaded by id unless given) and the eval rows to run."""
    if env is None:
        from verifiers.envs.loader import load_environment

        env = load_environment(config.env_id, **config.env_args)
    rows = list(env.get_eval_dataset(config.num_examples).to_list())
    if config.num_examples > len(rows):
        console.print(
            f"note: -n {config.num_examples} asked for more examples than the eval split has; "
            f"evaluating all {len(rows)}",
            markup=False,
            highlight=False,
        )
    return env, rows


def _check_endpoints(config: EvalConfig, endpoints: list[Endpoint], console: Console) -> None:
    """Say which endpoints are used (verbose), then check them before any rollout starts."""
    if config.verbose:
        for ep in endpoints:
            _, from_env = api_key_for(ep)
            key_note = (
                "" if from_env else f" ({ep.api_key_var} is not set: sending the placeholder key EMPTY)"
            )
            console.print(f"endpoint {ep.base_url} model {ep.model}{key_note}")

    if config.check_endpoint:
        for checked in check_endpoints(endpoints, headers=config.headers or None):
            for warning in checked.warnings:
                console.print(f"warning: {warning}", markup=False, highlight=False, soft_wrap=True)
    else:
        for ep in endpoints:
            check_base_url(ep.base_url)


def _run_session(
    config: EvalConfig,
    env: Environment,
    client: ChatClient,
    model: str,
    inputs: list[RolloutInput],
    rollout_timeout_s: float | None,
    store: RunStore | None,
    session: list[RolloutResult],
    secrets: list[str],
    console: Console,
) -> tuple[RunStatus, RunMetadata | None]:
    """Run the rollouts under the progress display; finished groups go to ``session`` (and the store).

    Whatever happens (even an unexpected exception or Ctrl-C), the run directory says how it ended.
    """

    def on_group(group: list[RolloutResult]) -> None:
        _scrub(group, secrets)
        if store is not None:
            store.append_group(group)
        session.extend(group)

    display = EvalDisplay(
        len(inputs), console, enabled=config.show_progress, plain_every_s=config.progress_every_s
    )
    status: RunStatus = "failed"
    try:
        with display:
            status = run_sync(
                _execute(env, client, model, inputs, config, rollout_timeout_s, on_group, display.update)
            )
    except KeyboardInterrupt:  # Ctrl-C before our handler was installed (or outside the main thread)
        status = "interrupted"
        raise
    finally:
        # Whatever happens (even an unexpected exception), the run directory says how it ended.
        metadata = store.finish(status) if store is not None else None
    return status, metadata


def errors_by_type(results: list[RolloutResult]) -> dict[str, int]:
    """Count of rollout-ending errors by class name (scoring errors are not counted here)."""
    return dict(Counter(r.error.type for r in results if r.error is not None).most_common())
