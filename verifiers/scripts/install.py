"""0.1.x path ``verifiers.scripts.install``: runs ``vf-install`` (`verifiers.cli.install`)."""

from __future__ import annotations

from verifiers.cli.install import main as _main

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Run ``vf-install`` with ``argv`` (default: the process arguments); returns the exit status."""
    return _main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
