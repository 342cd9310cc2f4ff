"""0.1.x path ``verifiers.scripts.eval``: runs ``vf-eval`` (`verifiers.cli.eval`)."""

from __future__ import annotations

from verifiers.cli.eval import main as _main

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Run ``vf-eval`` with ``argv`` (default: the process arguments); returns the exit status."""
    return _main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
