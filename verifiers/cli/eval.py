"""``vf-eval``: evaluate an environment against a model and report (and save) the results.

Thin on purpose: parse the command line into an `EvalConfig`, call `run_eval`, print
the summary. Everything else lives in `verifiers.eval` so scripts get the same behaviour.
Run ``vf-eval --help`` for the flags; docs/evaluation.md explains them.
"""

from __future__ import annotations

import argparse
import importlib
import json
import shlex
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from verifiers.cli.quiet import quiet_libraries
from verifiers.errors import ConfigError, VFError

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_CONFIG = 2
EXIT_INTERRUPTED = 130
DIALECTS = ("verifiers.v1.cli",)
"""Command-line dialects of layers above the core, asked first: a v1 taskset is documented with
upstream vf-eval's flags, so its dialect (``verifiers.v1.cli``) reads such a command line. Named,
not imported statically (the core does not depend on the v1 layer); each module has
``claims(argv) -> bool`` and ``main(argv, load_env=...) -> int``."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="vf-eval",
        description="Evaluate an environment against an OpenAI-compatible model; save and resume runs.",
        epilog="Examples: vf-eval reverse-text -m gpt-4.1-mini -n 10 -r 3 -s | vf-eval reverse-text -R | "
        "vf-eval --view. A v1 taskset (verifiers 0.4's Taskset package) takes upstream vf-eval's flags "
        "instead: --env.taskset.*, --env.agent.*, --client.*, --select.*, --sampling.*, @ config.toml, "
        "and there -s SHUFFLES the tasks rather than saving; see vf-eval TASKSET_ID --help.",
    )
    p.add_argument("env", nargs="?", help="environment id (an installed package, '-' becomes '_')")
    _add_environment_flags(p.add_argument_group("environment"))
    _add_model_flags(p.add_argument_group("model and endpoint"))
    _add_run_flags(p.add_argument_group("the run"))
    _add_output_flags(p.add_argument_group("saving, resuming and viewing"))
    _add_legacy_flags(p)
    return p


def _add_environment_flags(g: argparse._ArgumentGroup) -> None:
    g.add_argument(
        "-a", "--env-args", default="{}", help="JSON object passed to load_environment (default: {})"
    )
    g.add_argument(
        "-p",
        "--env-dir-path",
        default=None,
        help="folder of local environments to import ENV from, before installed ones "
        "(default: ./environments when it holds ENV)",
    )


def _add_model_flags(g: argparse._ArgumentGroup) -> None:
    g.add_argument(
        "-m", "--model", default=None, help="model name or endpoints alias (default: gpt-4.1-mini)"
    )
    g.add_argument(
        "-b",
        "--base-url",
        "--api-base-url",
        dest="base_url",
        default=None,
        help="API base URL (default: the alias's, else OpenAI's)",
    )
    g.add_argument(
        "-k",
        "--api-key-var",
        default=None,
        help="NAME of the environment variable holding the API key (default: OPENAI_API_KEY)",
    )
    g.add_argument(
        "-e",
        "--endpoints",
        "--endpoints-path",
        dest="endpoints",
        default=None,
        help="endpoints registry: TOML, or a 0.1.x endpoints.py with ENDPOINTS, or the folder holding it "
        "(default: ./configs/endpoints.toml, ./configs/endpoints.py, ~/.config/verifiers/endpoints.toml)",
    )
    g.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="'NAME: VALUE'",
        help="extra HTTP header (repeatable)",
    )


def _add_run_flags(g: argparse._ArgumentGroup) -> None:
    g.add_argument(
        "-n", "--num-examples", type=int, default=5, help="examples to evaluate, -1 for all (default: 5)"
    )
    g.add_argument(
        "-r", "--rollouts-per-example", type=int, default=3, help="rollouts per example (default: 3)"
    )
    g.add_argument(
        "-c",
        "--max-concurrent",
        type=int,
        default=32,
        help="rollouts in flight, <= 0: no limit (default: 32)",
    )
    g.add_argument("-t", "--max-tokens", type=int, default=None, help="max_tokens per model call")
    g.add_argument("-T", "--temperature", type=float, default=None, help="sampling temperature")
    g.add_argument(
        "-S", "--sampling-args", default=None, help="JSON object of sampling args, merged over -t/-T"
    )
    g.add_argument("--timeout", type=float, default=None, help="per-rollout timeout in seconds")
    g.add_argument(
        "--max-retries",
        type=int,
        default=3,
        help="retries per model request on 429/5xx/timeouts (default: 3)",
    )
    g.add_argument("--no-progress", action="store_true", help="no live progress display")
    g.add_argument(
        "--progress-every",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="when stderr is not a terminal (CI, a pipe): one plain progress line this often, 0: none "
        "(default: 10)",
    )
    g.add_argument(
        "--no-check",
        action="store_true",
        help="skip the endpoint check before the run (reachable, /v1/models lists the model, key accepted)",
    )
    g.add_argument("-v", "--verbose", action="store_true", help="more detail, and tracebacks on errors")


def _add_output_flags(g: argparse._ArgumentGroup) -> None:
    g.add_argument(
        "-s",
        "--save",
        "--save-results",
        dest="save",
        action="store_true",
        help="save results under the output directory (with a v1 taskset, -s shuffles the tasks instead: "
        "the taskset's dialect)",
    )
    g.add_argument(
        "-o", "--output-dir", default=None, help="root of saved runs (default: ./outputs; implies -s)"
    )
    g.add_argument(
        "-R",
        "--resume",
        nargs="?",
        const=True,
        default=None,
        metavar="RUN_DIR",
        help="resume the latest incomplete run with the same settings (or RUN_DIR); implies -s",
    )
    g.add_argument(
        "--view", nargs="?", const="", default=None, metavar="RUN_DIR", help="browse saved runs, or one run"
    )
    g.add_argument(
        "--report", action="store_true", help="write a self-contained HTML report into the run dir"
    )
    g.add_argument(
        "--save-dataset", default=None, metavar="DIR", help="export the run as a HF dataset to DIR"
    )
    g.add_argument(
        "-H",
        "--save-to-hf-hub",
        action="store_true",
        help="push the results as a dataset to the Hugging Face Hub (implies -s)",
    )
    g.add_argument(
        "-D",
        "--hf-hub-dataset-name",
        default="",
        help="Hub dataset repo for -H (default: <env>--<model>)",
    )
    g.add_argument(
        "--fail-threshold",
        type=float,
        default=1.0,
        metavar="SHARE",
        help="exit 1 when at least this share of rollouts errored (default: 1.0 = every rollout)",
    )


LEGACY_IGNORED = {
    "no_interleave_scoring": "-N/--no-interleave-scoring: scoring here runs per group as rollouts finish; "
    "results do not depend on it, so it is ignored",
    "tui": "-u/--tui: the live display is always on (use --no-progress to turn it off); ignored",
}
LEGACY_REFUSED = {
    "independent_scoring": "--independent-scoring is not supported: rubrics score each group together "
    "(group rewards need the whole group); drop the flag",
    "extra_env_kwargs": "-x/--extra-env-kwargs is not supported: pass constructor arguments through "
    "-a/--env-args to load_environment instead",
    "state_columns": "-C/--state-columns is not needed: every rollout's full state is saved in results.jsonl; "
    "drop the flag",
}


def _add_legacy_flags(p: argparse.ArgumentParser) -> None:
    """0.1.x flags without a counterpart: accepted, then mapped, ignored with a note, or refused by name."""
    p.add_argument("-N", "--no-interleave-scoring", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("-u", "--tui", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("-d", "--debug", action="store_true", help="plain output without the live display (0.1.x)")
    p.add_argument("--independent-scoring", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("-x", "--extra-env-kwargs", default=None, help=argparse.SUPPRESS)
    p.add_argument("-C", "--state-columns", default=None, help=argparse.SUPPRESS)


def check_legacy_flags(args: argparse.Namespace, err: Any) -> None:
    """Refuse 0.1.x flags we cannot honour (by name), note the ones that change nothing.

    A refused flag is refused whatever its value (``-x '{}'`` too): a flag that is accepted only
    when empty would say it works when it does nothing.
    """
    for name, why in LEGACY_REFUSED.items():
        value = getattr(args, name, None)
        if value is not None and value is not False:
            raise ConfigError(why)
    for name, note in LEGACY_IGNORED.items():
        if getattr(args, name, False):
            err.print(f"note: {note}")
    if args.env and args.env.endswith(".toml"):
        raise ConfigError(
            f"{args.env!r}: multi-environment TOML eval configs (0.1.x) are not supported; "
            "run vf-eval once per environment"
        )
    if not 0.0 < args.fail_threshold <= 1.0:
        raise ConfigError(f"--fail-threshold must be in (0, 1], got {args.fail_threshold}")


def _json_object(text: str | None, flag: str) -> dict[str, Any]:
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{flag} must be a JSON object, e.g. '{{\"key\": 1}}'; could not parse {text!r}: {exc}"
        ) from None
    if not isinstance(value, dict):
        raise ConfigError(f"{flag} must be a JSON object (a dict), got {type(value).__name__}: {text!r}")
    return value


def parse_headers(values: list[str]) -> dict[str, str]:
    """``['Name: value', ...]`` as a dict; a malformed entry is a ConfigError."""
    headers: dict[str, str] = {}
    for raw in values:
        name, sep, value = raw.partition(":")
        if not sep or not name.strip():
            raise ConfigError(f"--header must look like 'Name: value', got {raw!r}")
        headers[name.strip()] = value.strip()
    return headers


def config_from_args(args: argparse.Namespace) -> Any:
    from verifiers.eval.runner import DEFAULT_MODEL, DEFAULT_OUTPUT_DIR, EvalConfig

    if not args.env:
        raise ConfigError("missing the environment id: vf-eval ENV [options] (or vf-eval --view)")
    sampling: dict[str, Any] = {}
    if args.max_tokens is not None:
        sampling["max_tokens"] = args.max_tokens
    if args.temperature is not None:
        sampling["temperature"] = args.temperature
    sampling.update(_json_object(args.sampling_args, "-S/--sampling-args"))
    resume: bool | Path = False
    if args.resume is True:
        resume = True
    elif args.resume is not None:
        resume = Path(args.resume)
    return EvalConfig(
        env_id=args.env,
        env_args=_json_object(args.env_args, "-a/--env-args"),
        model=args.model or DEFAULT_MODEL,
        base_url=args.base_url,
        api_key_var=args.api_key_var,
        endpoints_path=Path(args.endpoints) if args.endpoints else None,
        num_examples=args.num_examples,
        rollouts_per_example=args.rollouts_per_example,
        max_concurrent=args.max_concurrent,
        sampling_args=sampling,
        rollout_timeout_s=args.timeout,
        max_retries=args.max_retries,
        headers=parse_headers(args.header),
        save=bool(
            args.save
            or args.output_dir
            or args.resume
            or args.report
            or args.save_dataset
            or args.save_to_hf_hub
        ),
        output_dir=Path(args.output_dir) if args.output_dir else DEFAULT_OUTPUT_DIR,
        resume=resume,
        show_progress=not (args.no_progress or args.debug),
        progress_every_s=args.progress_every,
        check_endpoint=not args.no_check,
        verbose=args.verbose,
    )


def print_outcome(result: Any, rollouts_per_example: int, out: Any) -> None:
    """The summary table and the first error message of each type (control characters escaped:
    an error message is text a model or server wrote). Both vf-eval dialects print this."""
    from verifiers.rollout.error_report import first_error_messages
    from verifiers.terminal import escape_controls

    _print_summary(result, rollouts_per_example, out)
    first_messages = first_error_messages(result.results)
    if first_messages:
        out.print("First error message of each type:")
        for kind, message in first_messages.items():
            out.print(escape_controls(f"  {kind}: {message[:500]}"), soft_wrap=True, markup=False)


def _print_summary(result: Any, rollouts_per_example: int, out: Console) -> None:
    try:
        from verifiers.eval.summary import render_summary, summarize
    except ImportError:  # the summary module is optional at import time
        rewards = [r.reward for r in result.results]
        mean = sum(rewards) / len(rewards) if rewards else 0.0
        out.print(f"{len(rewards)} rollouts, reward mean {mean:.4f}")
        return
    render_summary(summarize(result.results, rollouts_per_example, wall_s=result.duration_s or None), out)


def _view(args: argparse.Namespace, out: Console) -> int:
    from verifiers.eval.viewer import view

    path: Path | None = Path(args.view) if args.view else None
    if path is None and args.output_dir:
        path = Path(args.output_dir) / "evals"
    view(path, out)
    return EXIT_OK


def resume_command(argv: list[str], run_dir: Path) -> str:
    """The command that continues ``run_dir``: the same arguments, any -R/--resume replaced by ``-R RUN_DIR``."""
    kept: list[str] = []
    skip_next = False
    for i, token in enumerate(argv):
        if skip_next:
            skip_next = False
            continue
        if token in ("-R", "--resume"):
            following = argv[i + 1] if i + 1 < len(argv) else None
            # -R takes an optional RUN_DIR: a following word is its value when it names a directory.
            skip_next = following is not None and not following.startswith("-") and Path(following).is_dir()
            continue
        if token.startswith("--resume="):
            continue
        kept.append(token)
    return shlex.join(["vf-eval", *kept, "-R", str(run_dir)])


def _run(
    args: argparse.Namespace,
    out: Console,
    err: Console,
    argv: list[str] | None = None,
    load_env: Callable[..., Any] | None = None,
) -> int:
    if args.view is not None:
        return _view(args, out)
    from verifiers.eval.legacy_flags import add_env_dir
    from verifiers.eval.runner import run_eval
    from verifiers.rollout.error_report import error_share

    check_legacy_flags(args, err)
    config = config_from_args(args)
    add_env_dir(config.env_id, args.env_dir_path, explicit=args.env_dir_path is not None)
    env = load_env(config.env_id, config.env_args) if load_env is not None else None
    result = run_eval(config, env=env, console=err)
    print_outcome(result, config.rollouts_per_example, out)
    if result.run_dir is not None:
        out.print(f"Saved: {result.run_dir}", soft_wrap=True)
        if args.report:
            from verifiers.eval.report import write_report

            out.print(f"Report: {write_report(result.run_dir)}", soft_wrap=True)
        if args.save_dataset:
            from verifiers.eval.export import save_dataset

            out.print(f"Dataset: {save_dataset(result.run_dir, Path(args.save_dataset))}", soft_wrap=True)
        if args.save_to_hf_hub:
            from verifiers.eval.legacy_flags import default_hub_dataset_name, push_to_hub

            repo = args.hf_hub_dataset_name or default_hub_dataset_name(config.env_id, config.model)
            out.print(f"Pushed to the Hugging Face Hub: {push_to_hub(result.run_dir, repo)}", soft_wrap=True)
    if result.status == "interrupted":
        if result.run_dir is not None:
            command = resume_command(argv if argv is not None else sys.argv[1:], result.run_dir)
            err.print(f"Resume with: {command}", markup=False, highlight=False, soft_wrap=True)
        else:
            err.print("Nothing was saved (no -s); run again with -s to keep results across interruptions")
        return EXIT_INTERRUPTED
    share = error_share(result.results)
    if result.results and share >= args.fail_threshold:
        err.print(
            f"vf-eval: {share:.0%} of {len(result.results)} rollouts errored "
            f"(--fail-threshold {args.fail_threshold:g}): exit status {EXIT_FAILED}"
        )
        return EXIT_FAILED
    return EXIT_OK


def _dialect_for(argv: list[str]) -> Any:
    """The first of `DIALECTS` that claims the command line, or None (ours reads it)."""
    for name in DIALECTS:
        try:
            dialect = importlib.import_module(name)
        except ImportError:  # a layer that cannot load must not break our own dialect
            continue
        if dialect.claims(argv):
            return dialect
    return None


def main(argv: list[str] | None = None, *, load_env: Callable[..., Any] | None = None) -> int:
    """Entry point of ``vf-eval``; returns the exit status (0 ok, 1 failed, 2 bad config, 130 interrupted).

    ``load_env(env_id, env_args)`` replaces the environment loader (``verifiers.scripts.eval``
    loads through its module's ``vf`` so 0.1.x tests can patch it).
    """
    tokens = list(sys.argv[1:] if argv is None else argv)
    dialect = _dialect_for(tokens)
    if dialect is not None:
        return int(dialect.main(tokens, load_env=load_env))
    args = build_parser().parse_args(argv)
    quiet_libraries(args.verbose)
    out = Console(soft_wrap=True)
    err = Console(stderr=True, soft_wrap=True)
    try:
        return _run(args, out, err, argv, load_env)
    except KeyboardInterrupt:
        err.print("interrupted")
        return EXIT_INTERRUPTED
    except Exception as exc:
        if args.verbose:
            traceback.print_exc()
        code = EXIT_CONFIG if isinstance(exc, ConfigError) else EXIT_FAILED
        label = "error" if isinstance(exc, VFError) else f"error ({type(exc).__name__})"
        print(f"vf-eval: {label}: {exc}", file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(main())
