"""vf-eval's v1 dialect: upstream verifiers 0.4's ``vf-eval`` command line, run by our eval.

A v1 taskset package is documented with upstream's command line (``vf-eval gsm8k -m M
--env.taskset.split test -n 50 -r 4 --no-push``), so when vf-eval is given one (or any of
upstream's dotted flags, or ``@ config.toml``) it reads that command line with upstream's
meanings and defaults instead of ours; `verifiers.cli.eval` asks `claims` by module name (the
core never imports this layer). Where the dialects clash the taskset's wins: ``-s`` shuffles
the tasks here (upstream's ``select.shuffle``) while in our dialect it saves, and ``-n`` is
upstream's ``select.limit`` (every task by default). The parsed command line becomes our
`EvalConfig`: ``--env.taskset.*`` and ``--env.agent.*``/``--select.*`` become the keyword
arguments of ``load_environment`` (`verifiers.v1.adapter`), the run is always saved, and
``traces.jsonl`` is written beside ``results.jsonl`` (`verifiers.v1.traces`).

Nothing is pushed anywhere: ``--no-push`` is accepted, and ``--push`` (upstream's default,
an upload to the Prime Intellect platform) runs locally with a note. Parsing follows
upstream's dotted flags: kebab or snake case, ``--x=v`` or ``--x v``, ``--flag``/``--no-flag``
for booleans, ``@ file.toml`` (same structure) merged under the command-line flags.
"""

from __future__ import annotations

import contextlib
import json
import sys
import tomllib
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from verifiers.config import merge
from verifiers.errors import ConfigError, VFError
from verifiers.v1.configs import PROGRAMS, AgentOptions, SelectOptions
from verifiers.v1.environment import CLOUD_RUNTIMES, CONTAINER_RUNTIMES

DEFAULT_MODEL = "deepseek/deepseek-v4-flash"
DEFAULT_BASE_URL = "https://api.pinference.ai/api/v1"
DEFAULT_API_KEY_VAR = "PRIME_API_KEY"
DOTTED_PREFIXES = ("--env.", "--client.", "--select.", "--sampling.", "--run.", "--rich.")

SHORT_FLAGS = {
    "-m": "model",
    "-n": "select.limit",
    "-s": "select.shuffle",
    "-r": "num_rollouts",
    "-c": "max_concurrent",
    "-o": "output_dir",
    "-v": "verbose",
}
ALIASES = {
    "m": "model",
    "n": "select.limit",
    "s": "select.shuffle",
    "r": "num_rollouts",
    "rollouts_per_example": "num_rollouts",
    "group_size": "num_rollouts",
    "c": "max_concurrent",
    "o": "output_dir",
    "v": "verbose",
    "select.n": "select.limit",
    "select.s": "select.shuffle",
    "sampling.max_completion_tokens": "sampling.max_tokens",
}
"""Upstream's alternative names of a setting (``-r``, ``--rollouts-per-example``, ``--group-size``)."""
OUR_FLAGS = {
    "-b": "client.base_url",
    "--base-url": "client.base_url",
    "--api-base-url": "client.base_url",
    "-k": "client.api_key_var",
    "--api-key-var": "client.api_key_var",
    "-t": "sampling.max_tokens",
    "--max-tokens": "sampling.max_tokens",
    "-T": "sampling.temperature",
    "--temperature": "sampling.temperature",
}
"""Flags of our dialect that mean one thing in both, accepted here too so an old command line
keeps working (``-a``/``--env-args``, ``--no-progress`` and ``--no-check`` are handled apart)."""
BOOLEAN = {
    "select.shuffle",
    "verbose",
    "push",
    "rich",
    "dry_run",
    "clean",
    "resume",
    "rich.show_logs",
    "check",
}
BOOL_WORDS = {"true": True, "false": False, "1": True, "0": False, "yes": True, "no": False}


def is_dialect_argv(argv: list[str]) -> bool:
    """Whether the command line is written in upstream's dialect (dotted flags or ``@ FILE``)."""
    return any(tok.startswith("@") or tok.startswith(DOTTED_PREFIXES) for tok in argv)


def claims(argv: list[str]) -> bool:
    """Whether vf-eval should read ``argv`` in this dialect: upstream's flags, or a first word
    naming a v1 taskset package (any environment package is importable by its id here)."""
    if any(
        tok in ("--view", "-p", "--env-dir-path") or tok.startswith(("--view=", "--env-dir-path="))
        for tok in argv
    ):
        return False  # our dialect's own modes; with -p the id must not be looked up before -p applies
    if is_dialect_argv(argv):
        return True
    return bool(argv) and not argv[0].startswith("-") and is_taskset(argv[0])


def is_taskset(env_id: str) -> bool:
    """Whether ``env_id`` loads through the v1 adapter (a package exporting a `Taskset`)."""
    if env_id.endswith(".toml"):
        return False
    from verifiers.envs.loader import find_loader

    try:
        return getattr(find_loader(env_id), "taskset_class", None) is not None
    except Exception:  # not installed or broken: our dialect reports it as it always has
        return False


def knows_flag(flag: str) -> bool:
    """Whether this dialect reads ``flag`` (the docs' flag check asks); under ``--env.taskset.``
    any name is a taskset's own field, so a dotted flag is known by its first part."""
    if flag in SHORT_FLAGS or flag in OUR_FLAGS:
        return True
    if flag in ("-a", "--env-args", "--no-progress", "--no-check", "-h", "--help"):
        return True
    if not flag.startswith("--"):
        return False
    path = flag[2:].replace("-", "_")
    path = path[3:] if path.startswith("no_") else path
    return path in ALIASES or path.split(".")[0] in V1EvalOptions.model_fields


# -- the command line as nested settings ---------------------------------------------------
def _value(text: str) -> Any:
    """A flag's value: JSON for a list or object, else the string (pydantic converts it to the
    field's type; ``null`` stays a string: ``--env.agent.harness.id null`` names a harness)."""
    if text[:1] in "[{":
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return text
    return text


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _set(tree: dict[str, Any], path: str, value: Any) -> None:
    path = ALIASES.get(path, path)
    *parents, leaf = path.split(".")
    node = tree
    for key in parents:
        child = node.get(key)
        if not isinstance(child, dict):
            child = node[key] = {}
        node = child
    if isinstance(value, dict) and isinstance(node.get(leaf), dict):
        node[leaf] = merge(node[leaf], value)
    else:
        node[leaf] = value


def _env_args_json(text: str, tree: dict[str, Any]) -> None:
    """Our ``-a '{...}'``: its ``agent`` and ``select`` keys as upstream's blocks, the rest
    taskset fields."""
    try:
        args = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"-a/--env-args must be a JSON object; could not parse {text!r}: {exc}") from None
    if not isinstance(args, dict):
        raise ConfigError(f"-a/--env-args must be a JSON object, got {text!r}")
    for key, value in args.items():
        where = {"agent": "env.agent", "select": "select"}.get(key, f"env.taskset.{key}")
        _set(tree, where, value)


def _flag_path(name: str) -> str:
    if name in OUR_FLAGS:
        return OUR_FLAGS[name]
    if name in SHORT_FLAGS:
        return SHORT_FLAGS[name]
    if name.startswith("--") and len(name) > 2:
        return name[2:].replace("-", "_")
    raise ConfigError(
        f"unknown flag {name!r} for a v1 taskset (its dialect: see `vf-eval TASKSET_ID --help`)"
    )


def parse_argv(argv: list[str]) -> tuple[str | None, dict[str, Any], list[Path]]:
    """``argv`` as (the positional taskset id, nested settings, ``@`` config files in order)."""
    positional = argv[0] if argv and not argv[0].startswith(("-", "@")) else None
    tree: dict[str, Any] = {}
    files: list[Path] = []
    i = 1 if positional else 0
    while i < len(argv):
        token, i = argv[i], i + 1
        if token.startswith("@"):
            name = token[1:]
            if not name:
                if i >= len(argv):
                    raise ConfigError("`@` needs a file: vf-eval @ config.toml")
                name, i = argv[i], i + 1
            files.append(Path(name))
            continue
        if not token.startswith("-") or token == "--":
            raise ConfigError(f"unexpected argument {token!r}: the taskset id comes first, then flags")
        name, eq, text = token.partition("=")
        if name in ("-a", "--env-args"):
            if not eq:
                if i >= len(argv):
                    raise ConfigError("-a/--env-args needs a JSON object")
                text, i = argv[i], i + 1
            _env_args_json(text, tree)
            continue
        if name in ("--no-progress", "--no-check"):
            _set(tree, "rich" if name == "--no-progress" else "check", False)
            continue
        path = _flag_path(name)
        nxt = argv[i] if i < len(argv) else None
        takes_next = (
            nxt is not None and not nxt.startswith("@") and (not nxt.startswith("-") or _is_number(nxt))
        )
        if eq:
            _set(tree, path, _value(text))
        elif ALIASES.get(path, path) in BOOLEAN:
            if takes_next and nxt.lower() in BOOL_WORDS:  # type: ignore[union-attr]
                _set(tree, path, BOOL_WORDS[nxt.lower()])  # type: ignore[union-attr]
                i += 1
            else:
                _set(tree, path, True)
        elif takes_next:
            _set(tree, path, _value(nxt))  # type: ignore[arg-type]
            i += 1
        else:  # a bare flag: `--flag` is true, `--no-flag` (or `--a.no-flag`) false
            parts = path.split(".")
            negated = [p for p in parts if p.startswith("no_")]
            if negated:
                parts[parts.index(negated[-1])] = negated[-1][3:]
            _set(tree, ".".join(parts), not negated)
    return positional, tree, files


def _snake_keys(value: Any, keep: bool = False) -> Any:
    """A TOML table with kebab-case keys as snake case (header names under ``headers`` kept)."""
    if not isinstance(value, dict):
        return value
    return {(k if keep else k.replace("-", "_")): _snake_keys(v, k == "headers") for k, v in value.items()}


def _aliased(table: dict[str, Any]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for key, value in table.items():
        if key == "select" and isinstance(value, dict):
            for sub, sub_value in value.items():
                _set(tree, f"select.{sub}", sub_value)
        else:
            _set(tree, key, value)
    return tree


def read_config_file(path: Path) -> dict[str, Any]:
    """An ``@`` file: a TOML (or JSON) table shaped like the flags (``[env.taskset]``, ``[client]``)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"@ {path}: cannot read the config file: {exc}") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(
            f"@ {path}: not valid {'JSON' if path.suffix == '.json' else 'TOML'}: {exc}"
        ) from None
    return _aliased(_snake_keys(data))


# -- the settings, typed ------------------------------------------------------------------
class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ClientOptions(_Strict):
    """``--client.*``: the model's OpenAI-compatible endpoint."""

    type: str = "eval"
    base_url: str = DEFAULT_BASE_URL
    api_key_var: str = DEFAULT_API_KEY_VAR
    headers: dict[str, str] = Field(default_factory=dict)

    @field_validator("type")
    @classmethod
    def _eval_only(cls, value: str) -> str:
        if value != "eval":
            raise ValueError(
                f"client.type {value!r} is upstream's training client (a vLLM /generate route); "
                "evaluation here talks to an OpenAI-compatible endpoint: drop --client.type or use eval"
            )
        return value


class SamplingOptions(BaseModel):
    """``--sampling.*``: typed knobs, any other key passed to the provider as given."""

    model_config = ConfigDict(extra="allow")

    temperature: float | None = None
    top_p: float | None = None
    reasoning_effort: str | None = None
    max_tokens: int | None = None

    @model_validator(mode="before")
    @classmethod
    def _typed_extras(cls, data: Any) -> Any:
        """An extra key from the command line is a string: read it as JSON when it is one."""
        if not isinstance(data, dict):
            return data
        out = dict(data)
        for key, value in data.items():
            if key not in cls.model_fields and isinstance(value, str):
                with contextlib.suppress(json.JSONDecodeError):
                    out[key] = json.loads(value)
        return out


class RunOptions(_Strict):
    name: str | None = None
    dir: str | None = None
    attach: str | None = None


class V1EvalOptions(_Strict):
    """The settings of an upstream vf-eval command line, with upstream's defaults."""

    env: dict[str, Any] = Field(default_factory=dict)
    model: str = DEFAULT_MODEL
    client: ClientOptions = Field(default_factory=ClientOptions)
    sampling: SamplingOptions = Field(default_factory=SamplingOptions)
    select: SelectOptions = Field(default_factory=SelectOptions)
    num_rollouts: int = Field(1, ge=1)
    max_concurrent: int | None = Field(128, ge=1)
    verbose: bool = False
    dry_run: bool = False
    clean: bool = False
    rich: bool | dict[str, Any] = True
    push: bool = True
    output_dir: Path = Path("outputs")
    resume: bool = False
    run: RunOptions = Field(default_factory=RunOptions)
    check: bool = True
    """Ours (``--no-check``): skip the endpoint check before the run."""

    @field_validator("max_concurrent", mode="before")
    @classmethod
    def _null(cls, value: Any) -> Any:
        return None if isinstance(value, str) and value.lower() in ("null", "none") else value


def _validation_message(exc: ValidationError) -> str:
    """pydantic's errors as the flags that caused them (``--select.limit: ...``)."""
    lines = []
    for err in exc.errors():
        flag = "--" + ".".join(str(p) for p in err["loc"]).replace("_", "-")
        lines.append(f"{flag}: {err['msg']}")
    return "; ".join(lines)


def resolve(argv: list[str]) -> tuple[str, V1EvalOptions]:
    """The taskset id and typed settings of an upstream command line (``@`` files under flags)."""
    positional, tree, files = parse_argv(argv)
    merged: dict[str, Any] = {}
    for path in files:
        merged = merge(merged, read_config_file(path))
    merged = merge(merged, tree)
    taskset = (merged.get("env") or {}).get("taskset") or {}
    named = taskset.get("id") if isinstance(taskset, dict) else None
    if positional and named and named != positional:
        raise ConfigError(
            f"the taskset is named twice, {positional!r} and --env.taskset.id {named!r}; drop one"
        )
    taskset_id = positional or named
    if not taskset_id:
        raise ConfigError(
            "no taskset: vf-eval TASKSET_ID [flags], or --env.taskset.id, or @ config.toml naming it"
        )
    try:
        return str(taskset_id), V1EvalOptions.model_validate(merged)
    except ValidationError as exc:
        raise ConfigError(_validation_message(exc)) from None


def check_agent(agent: dict[str, Any]) -> None:
    """Refuse, with the command-line spelling of the local alternative, what needs a sandbox or a
    cloud account: a harness other than ``null``, a runtime other than ``subprocess``."""
    try:
        options = AgentOptions.model_validate(agent)
    except ValidationError as exc:
        raise ConfigError(_validation_message(exc).replace("--", "--env.agent.")) from None
    harness = options.harness.id
    if harness != "null" and harness not in PROGRAMS:
        raise ConfigError(
            f"--env.agent.harness.id {harness}: that harness installs a vendor's agent program in a sandbox "
            "(upstream provisions it in a container or a cloud sandbox), which this vf-eval does not; the local "
            f"alternatives: --env.agent.harness.id null (the in-process chat loop) or "
            f"{' or '.join(PROGRAMS)} (a local agent program)"
        )
    kind = options.runtime.type
    if kind in CLOUD_RUNTIMES:
        raise ConfigError(
            f"--env.agent.runtime.type {kind}: that runtime needs a {CLOUD_RUNTIMES[kind]} account; the local "
            "alternative runs everything on this machine: --env.agent.runtime.type subprocess"
        )
    if kind != "subprocess":
        what = "a container runtime" if kind in CONTAINER_RUNTIMES else "a runtime"
        raise ConfigError(
            f"--env.agent.runtime.type {kind}: {what} this vf-eval does not provide; the local alternative: "
            "--env.agent.runtime.type subprocess"
        )


def translate(taskset_id: str, opts: V1EvalOptions, notes: list[str]) -> Any:
    """Our `EvalConfig` for the settings; ``notes`` gets what was accepted but means nothing here."""
    from verifiers.eval.runner import EvalConfig

    env = dict(opts.env)
    unknown = sorted(set(env) - {"taskset", "agent"})
    if unknown:
        raise ConfigError(
            f"--env.{unknown[0]}: only --env.taskset.* and --env.agent.* are read here (upstream's other "
            "environments, e.g. multi-agent ones, do not run in this vf-eval)"
        )
    agent = env.get("agent") or {}
    check_agent(agent)
    if opts.run.attach:
        raise ConfigError(
            "--run.attach streams into a Prime Intellect platform run; this vf-eval pushes nowhere"
        )
    if opts.run.name or opts.run.dir:
        raise ConfigError(
            "--run.name/--run.dir: runs are saved under OUTPUT_DIR/evals/<taskset>--<model>/<run id>/ here; "
            "choose the place with -o OUTPUT_DIR"
        )
    if opts.push and "push" in opts.model_fields_set:
        notes.append("--push: this vf-eval pushes nowhere; the run is saved locally only")
    if opts.clean:
        notes.append("--clean: ignored; every run here gets a new run directory")
    env_args: dict[str, Any] = {k: v for k, v in (env.get("taskset") or {}).items() if k != "id"}
    if agent:
        env_args["agent"] = agent
    select = opts.select.model_dump(exclude_defaults=True)
    if select:
        env_args["select"] = select
    return EvalConfig(
        env_id=taskset_id,
        env_args=env_args,
        model=opts.model,
        base_url=opts.client.base_url,
        api_key_var=opts.client.api_key_var,
        num_examples=-1,
        rollouts_per_example=opts.num_rollouts,
        max_concurrent=opts.max_concurrent or 0,
        sampling_args=opts.sampling.model_dump(exclude_none=True),
        headers=opts.client.headers,
        save=True,
        output_dir=opts.output_dir,
        resume=opts.resume,
        show_progress=opts.rich is not False,
        check_endpoint=opts.check,
        verbose=opts.verbose,
    )


# -- help ---------------------------------------------------------------------------------
FLAGS_HELP = """\
the run (upstream vf-eval's flags and defaults):
  -m, --model MODEL                 model id (default: deepseek/deepseek-v4-flash)
  --client.base-url URL             OpenAI-compatible endpoint (default: https://api.pinference.ai/api/v1)
  --client.api-key-var NAME         environment variable holding the key (default: PRIME_API_KEY)
  --client.headers '{"N": "V"}'     extra HTTP headers
  --sampling.max-tokens N, --sampling.temperature T, --sampling.top-p P,
  --sampling.reasoning-effort E, --sampling.<other> V   sampling, passed to the provider
  -n, --select.limit N              evaluate at most N tasks (default: all of them)
  -s, --select.shuffle              SHUFFLE the tasks (under --select.seed, default 0) before
                                    --select.skip/-n; in our dialect -s saves (here every run is saved)
  --select.skip N, --select.include.idx '0:10,17', --select.include.ids, --select.include.names,
  --select.exclude.idx/ids/names    which tasks run (include, exclude, shuffle, skip, limit)
  -r, --num-rollouts N              rollouts per task (aliases --rollouts-per-example, --group-size; default: 1)
  -c, --max-concurrent N            rollouts in flight (default: 128; null: no limit)
  -o, --output-dir DIR              runs are saved under DIR/evals/<taskset>--<model>/<run id>/ with
                                    results.jsonl and traces.jsonl (default: outputs)
  --resume                          continue the latest incomplete run with the same settings
  --dry-run                         print the resolved settings and exit
  --no-push                         accepted; --push (upstream's default) only notes that nothing is pushed
  --no-rich                         no live display
  -v, --verbose                     more detail, and tracebacks on errors
  @ FILE.toml                       settings in a TOML file shaped like the flags ([env.taskset],
                                    [client], [select], model = ...); the command line wins

the taskset and the agent:
  --env.taskset.<field> V           a field of the taskset's config (listed below when known)
  --env.agent.harness.id null       the in-process chat loop (default)
  --env.agent.harness.id bash       a local agent program with bash and edit tools (no Toolsets)
  --env.agent.harness.tool-timeout S, --env.agent.harness.disabled-tools '["t"]', --env.agent.harness.edit false
  --env.agent.runtime.type subprocess   local (the only runtime here: no cloud sandbox, no container)
  --env.agent.max-turns N           model turns per rollout (default: until no tool call)

values: --x=v or --x v, kebab or snake case; booleans --flag/--no-flag; lists and dicts as JSON.
also accepted from our dialect: -b URL, -k VAR, -t N, -T T, -a JSON, --no-progress, --no-check."""


def _taskset_fields(taskset_id: str) -> list[str]:
    from verifiers.envs.loader import find_loader

    try:
        cls = getattr(find_loader(taskset_id), "taskset_class", None)
    except Exception as exc:
        return [f"  (cannot list its fields: {exc})"]
    if cls is None:
        return []
    lines = []
    for name, field in cls.config_type().model_fields.items():
        if name in ("id", "task"):
            continue
        shown = getattr(field.annotation, "__name__", None) or str(field.annotation).replace("typing.", "")
        default = (
            "required"
            if field.is_required()
            else f"default: {field.get_default(call_default_factory=True)!r}"
        )
        lines.append(f"  --env.taskset.{name.replace('_', '-')} {shown} ({default})")
    return lines or ["  (its config has no fields of its own)"]


def help_text(taskset_id: str | None) -> str:
    head = [
        "usage: vf-eval TASKSET_ID [flags] [@ config.toml]",
        "",
        "vf-eval's v1 dialect: TASKSET_ID is a verifiers v1 taskset package, so the command line is "
        "read as upstream verifiers 0.4's vf-eval reads it (our eval runs it; `vf-eval --help` shows our "
        "own dialect). Where the two clash the taskset's wins: -s shuffles here, it saves in ours.",
        "",
        FLAGS_HELP,
    ]
    if taskset_id:
        head += ["", f"{taskset_id}'s config fields:", *_taskset_fields(taskset_id)]
    return "\n".join(head)


# -- running ------------------------------------------------------------------------------
def _load(taskset_id: str, env_args: dict[str, Any], load_env: Callable[..., Any] | None) -> Any:
    from verifiers.v1.environment import TasksetEnv
    from verifiers.v1.program_env import TasksetProgramEnv

    if load_env is not None:
        env = load_env(taskset_id, env_args)
    else:
        from verifiers.envs.loader import load_environment

        env = load_environment(taskset_id, **env_args)
    if not isinstance(env, TasksetEnv | TasksetProgramEnv):
        raise ConfigError(
            f"{taskset_id!r} is not a v1 taskset (it has load_environment); upstream's dotted flags and "
            "@ files are for tasksets: use our flags (see vf-eval --help)"
        )
    env.finished_traces = {}
    return env


def _run(argv: list[str], out: Any, err: Any, load_env: Callable[..., Any] | None) -> int:
    from verifiers.cli.eval import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, print_outcome
    from verifiers.eval.runner import run_eval
    from verifiers.rollout.error_report import error_share
    from verifiers.v1.traces import write_traces

    taskset_id, opts = resolve(argv)
    notes: list[str] = []
    config = translate(taskset_id, opts, notes)
    for note in notes:
        err.print(f"note: {note}", markup=False, highlight=False)
    if opts.dry_run:
        out.print_json(config.model_dump_json())
        return EXIT_OK
    env = _load(taskset_id, config.env_args, load_env)
    result = run_eval(config, env=env, console=err)
    print_outcome(result, config.rollouts_per_example, out)
    if result.run_dir is not None:
        agent = env.agent.model_dump(mode="json")
        traces = write_traces(
            result.run_dir, result.results, env.finished_traces, config.model, agent, result.resumed
        )
        out.print(f"Saved: {result.run_dir} (results.jsonl, {traces.name})", soft_wrap=True, markup=False)
    if result.status == "interrupted":
        err.print("Resume with the same command line and --resume", markup=False)
        return EXIT_INTERRUPTED
    if result.results and error_share(result.results) >= 1.0:
        err.print(f"vf-eval: every rollout errored: exit status {EXIT_FAILED}")
        return EXIT_FAILED
    return EXIT_OK


def main(argv: list[str], *, load_env: Callable[..., Any] | None = None) -> int:
    """vf-eval in upstream's dialect; returns the exit status (as ours: 0, 1, 2 bad config, 130)."""
    from rich.console import Console

    from verifiers.cli.eval import EXIT_CONFIG, EXIT_FAILED, EXIT_INTERRUPTED
    from verifiers.cli.quiet import quiet_libraries

    if any(tok in ("-h", "--help") for tok in argv):
        first = argv[0] if argv and not argv[0].startswith(("-", "@")) else None
        print(help_text(first))
        return 0
    verbose = any(tok in ("-v", "--verbose") for tok in argv)
    quiet_libraries(verbose)
    out = Console(soft_wrap=True)
    err = Console(stderr=True, soft_wrap=True)
    try:
        return _run(argv, out, err, load_env)
    except KeyboardInterrupt:
        err.print("interrupted")
        return EXIT_INTERRUPTED
    except Exception as exc:
        if verbose:
            traceback.print_exc()
        code = EXIT_CONFIG if isinstance(exc, ConfigError) else EXIT_FAILED
        label = "error" if isinstance(exc, VFError) else f"error ({type(exc).__name__})"
        print(f"vf-eval: {label}: {exc}", file=sys.stderr)
        return code
