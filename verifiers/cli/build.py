"""``vf-build [ENV ...] --out DIR``: build environment wheels into a PEP 503 hub directory."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from verifiers.errors import VFError
from verifiers.hub.build import DEFAULT_ENVIRONMENTS_DIR, DEFAULT_HUB_DIR, build_hub, resolve_environment_dir

EXIT_OK = 0
EXIT_CONFIG = 2


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="vf-build",
        description="Build wheels of environment packages and write a PEP 503 simple index that any static "
        "file server can serve. New versions are added next to the ones already in DIR.",
        epilog="Example: vf-build --out hub && python -m http.server -d hub 8000 "
        "# then: vf-install NAME --index-url http://HOST:8000/simple",
    )
    p.add_argument(
        "envs",
        nargs="*",
        metavar="ENV",
        help="package folders or environment ids under --environments-dir (default: every package there)",
    )
    p.add_argument(
        "-o", "--out", default=str(DEFAULT_HUB_DIR), help=f"hub directory (default: {DEFAULT_HUB_DIR})"
    )
    p.add_argument(
        "--environments-dir",
        default=str(DEFAULT_ENVIRONMENTS_DIR),
        help=f"where ENV ids are looked up (default: ./{DEFAULT_ENVIRONMENTS_DIR})",
    )
    p.add_argument("--python", default=None, help="interpreter that runs the builds (default: this one)")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace a published wheel of the same version whose contents changed (default: refuse)",
    )
    p.add_argument(
        "--no-verifiers",
        action="store_true",
        help="do not publish a wheel of this verifiers next to the environments (default: publish it, so "
        "installs from the hub never take the unrelated 'verifiers' on PyPI)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    root = Path(args.environments_dir)
    try:
        dirs = [resolve_environment_dir(spec, root) for spec in args.envs]
        result = build_hub(
            dirs or None, Path(args.out), environments_dir=root, python=args.python, overwrite=args.overwrite,
            include_verifiers=not args.no_verifiers,
        )
    except VFError as exc:
        print(f"vf-build: error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    for f in result.built:
        print(f"built {f.project} {f.version}: {f.filename}  sha256={f.sha256[:12]}...")
    projects = sorted({f.project for f in result.files} - {"verifiers"})
    with_self = any(f.project == "verifiers" for f in result.files)
    print(f"\nHub at {result.hub_dir}: {len(result.files)} wheel(s) of {len(projects)} environment(s)"
          + (" and of verifiers itself." if with_self else "."))
    print(
        "Serve it with any static file server, e.g.\n"
        f"  python -m http.server --directory {args.out} 8000\n"
        "and install from it with\n"
        f"  vf-install {projects[0] if projects else 'NAME'} --index-url http://HOST:8000/simple"
    )
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
