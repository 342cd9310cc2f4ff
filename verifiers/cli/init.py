"""``vf-init NAME``: scaffold an environment package that passes ``check_environment`` as generated."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

from verifiers.errors import VFError
from verifiers.hub.scaffold import KINDS, scaffold_environment

EXIT_OK = 0
EXIT_CONFIG = 2


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="vf-init",
        description="Create environments/<module>/ with pyproject.toml (entry point), the module with "
        "load_environment, a README with env-args and metrics tables, and a test.",
        epilog="Example: vf-init my-env --kind tool && python -m pytest environments/my_env "
        "(pytest: pip install pytest, or the dev extra)",
    )
    p.add_argument("name", help="environment id, e.g. my-env (module my_env, distribution my-env)")
    p.add_argument(
        "--kind",
        choices=KINDS,
        default="single",
        help="single: one model call; multi: a turn loop with environment replies; tool: tool calls; "
        "agent: an OpenAI SDK program run through the interception gateway (default: single)",
    )
    p.add_argument(
        "-p",
        "--path",
        "--environments-dir",
        dest="environments_dir",
        default="environments",
        help="folder to create the package in (default: ./environments)",
    )
    p.add_argument("-d", "--description", default=None, help="one-line description for pyproject and README")
    p.add_argument(
        "-f", "--force", action="store_true", help="overwrite the generated files of an existing folder"
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result = scaffold_environment(
            args.name,
            Path(args.environments_dir),
            kind=args.kind,
            description=args.description,
            force=args.force,
        )
    except VFError as exc:
        print(f"vf-init: error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    names = result.names
    print(f"Created {result.kind} environment {names.env_id!r} in {result.package_dir}:")
    for path in result.files:
        print(f"  {path}")
    print("\nNext steps:")
    for line in _test_steps(result.package_dir):
        print(f"  {line}")
    print(f"  vf-install {result.package_dir}    (or: pip install -e {result.package_dir})")
    print(f"  vf-eval {names.env_id} -m MODEL -b BASE_URL")
    return EXIT_OK


def _test_steps(package_dir: Path) -> list[str]:
    """How to run the generated tests with this interpreter's pytest.

    ``python -m pytest`` and not a bare ``pytest``: a pytest from another environment cannot import
    verifiers. The Quickstart install (the train extra) has no pytest, so say how to get it.
    """
    run = f"python -m pytest {package_dir}    (its tests pass as generated)"
    if importlib.util.find_spec("pytest") is None:
        return ["pip install pytest    (not in this environment yet; the dev extra has it too)", run]
    return [run]


if __name__ == "__main__":
    sys.exit(main())
