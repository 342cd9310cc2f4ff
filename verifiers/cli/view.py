"""``vf-view``: browse saved eval runs in the terminal, or write a run's HTML report.

    vf-view                      runs under outputs/evals (a prompt loop on a terminal)
    vf-view RUN_DIR              one run: metadata, summary, rollouts
    vf-view RUN_DIR --sort reward   the rollouts lowest reward first (reward-desc: highest first)
    vf-view RUN_DIR --rollout 3:0   the transcript of example 3, rollout 0 (3 alone: all of example 3)
    vf-view RUN_DIR --report [OUT]  a self-contained HTML page (default RUN_DIR/report.html)

Thin on purpose: parsing here, behaviour in `verifiers.eval.viewer` and `verifiers.eval.report`.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path

from rich.console import Console

from verifiers.errors import ConfigError, VFError

EXIT_OK, EXIT_FAILED, EXIT_CONFIG, EXIT_INTERRUPTED = 0, 1, 2, 130


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="vf-view",
        description="Browse saved vf-eval runs and rollouts, or write a run's HTML report.",
    )
    p.add_argument(
        "path",
        nargs="?",
        default=None,
        metavar="RUN_DIR",
        help="a run directory, or a folder of runs (default: outputs/evals)",
    )
    p.add_argument(
        "--report",
        nargs="?",
        const="",
        default=None,
        metavar="OUT",
        help="write a self-contained HTML report of RUN_DIR (default RUN_DIR/report.html)",
    )
    p.add_argument(
        "--rollout", default=None, metavar="EX:R", help="print one rollout's transcript (EX: all of it)"
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--interactive", dest="interactive", action="store_true", default=None, help="always prompt"
    )
    mode.add_argument(
        "--no-interactive", dest="interactive", action="store_false", help="print the listing and exit"
    )
    p.add_argument(
        "--sort",
        choices=["example", "reward", "reward-desc"],
        default="example",
        help="order of the rollout table: example, reward (lowest first), reward-desc (highest first); "
        "'r' switches it when prompting (default: example)",
    )
    p.add_argument("--page-size", type=int, default=30, help="rollouts per page when prompting (default 30)")
    p.add_argument("-v", "--verbose", action="store_true", help="show tracebacks")
    return p


def _run(args: argparse.Namespace, out: Console) -> int:
    if args.report is not None:
        from verifiers.eval.export import is_run_dir
        from verifiers.eval.report import write_report

        if args.path is None or not is_run_dir(Path(args.path)):
            raise ConfigError(
                "--report needs a run directory: vf-view outputs/evals/<env>--<model>/<run-id> --report"
            )
        path = write_report(Path(args.path), Path(args.report) if args.report else None)
        out.print(f"Report: {path}", soft_wrap=True, markup=False, highlight=False)
        return EXIT_OK
    from verifiers.eval.viewer import view

    view(
        Path(args.path) if args.path else None,
        out,
        interactive=args.interactive,
        rollout=args.rollout,
        page_size=args.page_size,
        sort=args.sort,
    )
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``vf-view``; returns the exit status (0 ok, 1 failed, 2 bad arguments, 130 interrupted)."""
    args = build_parser().parse_args(argv)
    out = Console()
    try:
        return _run(args, out)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as exc:
        if args.verbose:
            traceback.print_exc()
        code = EXIT_CONFIG if isinstance(exc, ConfigError) else EXIT_FAILED
        label = "error" if isinstance(exc, VFError) else f"error ({type(exc).__name__})"
        print(f"vf-view: {label}: {exc}", file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(main())
