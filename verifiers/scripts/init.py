"""0.1.x path ``verifiers.scripts.init``: runs ``vf-init`` (`verifiers.cli.init`)."""

from __future__ import annotations

from verifiers.cli.init import main as _main

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Run ``vf-init`` with ``argv`` (default: the process arguments); returns the exit status."""
    return _main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
