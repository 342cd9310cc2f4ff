"""``vf-install SPEC``: install an environment from a folder, a wheel, a git URL or a hub, then load it."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from verifiers.errors import VFError
from verifiers.hub.build import DEFAULT_ENVIRONMENTS_DIR
from verifiers.hub.install import HUB_URL_ENV_VAR, config_path, install_environment

EXIT_OK = 0
EXIT_CONFIG = 2


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="vf-install",
        description="Install an environment package with pip, then check that it loads.",
        epilog=f"SPEC is NAME[@VERSION], a package folder, a .whl file, or a git+URL. NAME is taken from "
        f"./environments/<module> when it exists and no --index-url is given, else from the hub: "
        f"--index-url, else ${HUB_URL_ENV_VAR}, else index_url in {config_path()}.",
    )
    p.add_argument("spec", help="NAME[@VERSION] | path/to/folder | path/to/file.whl | git+URL")
    p.add_argument(
        "-i", "--index-url", default=None, help="the hub's PEP 503 index, e.g. http://HOST:8000/simple"
    )
    p.add_argument(
        "--extra-index-url",
        action="append",
        default=[],
        help="another index for dependencies (repeatable), e.g. https://pypi.org/simple",
    )
    p.add_argument(
        "--python", default=None, help="install into this interpreter's environment (default: this one)"
    )
    p.add_argument(
        "--environments-dir",
        default=str(DEFAULT_ENVIRONMENTS_DIR),
        help=f"where NAME is looked up as a folder first (default: ./{DEFAULT_ENVIRONMENTS_DIR})",
    )
    p.add_argument("-a", "--env-args", default="{}", help="JSON object for load_environment while checking")
    p.add_argument("--check", action="store_true", help="also run check_environment (scripted rollouts)")
    p.add_argument("--no-verify", action="store_true", help="do not load the environment after installing")
    p.add_argument("--no-deps", action="store_true", help="do not install dependencies")
    p.add_argument(
        "--force-reinstall", action="store_true", help="reinstall the package (not its dependencies)"
    )
    p.add_argument(
        "--allow-sdist",
        action="store_true",
        help="from a hub, also install source distributions (building one runs its code); by default "
        "only wheels are taken from a hub",
    )
    p.add_argument(
        "--use-pip-config",
        action="store_true",
        help="let pip read this machine's pip configuration (PIP_* variables, pip.conf) and so its other "
        "indexes; by default a hub install uses the hub (and --extra-index-url) only",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="show pip's output as it runs")
    return p


def source_summary(sources: dict[str, str | None]) -> str:
    """Where the packages came from, one count per index host (``-v`` lists each package)."""
    from collections import Counter
    from urllib.parse import urlsplit

    hosts = Counter((urlsplit(url).netloc or urlsplit(url).scheme or url) if url else "unknown source"
                    for url in sources.values())
    return ", ".join(f"{n} package{'s' if n != 1 else ''} from {host}" for host, n in hosts.most_common())


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        env_args = json.loads(args.env_args)
    except ValueError as exc:
        print(f"vf-install: error: --env-args is not valid JSON: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if not isinstance(env_args, dict):
        print("vf-install: error: --env-args must be a JSON object, e.g. '{\"seed\": 1}'", file=sys.stderr)
        return EXIT_CONFIG
    try:
        result = install_environment(
            args.spec,
            index_url=args.index_url,
            extra_index_urls=args.extra_index_url,
            python=args.python,
            environments_dir=Path(args.environments_dir),
            env_args=env_args,
            verify=not args.no_verify,
            check=args.check,
            no_deps=args.no_deps,
            force_reinstall=args.force_reinstall,
            allow_sdist=args.allow_sdist,
            stream_output=args.verbose,
            progress=lambda line: print(line, file=sys.stderr, flush=True),
            use_pip_config=args.use_pip_config,
        )
    except VFError as exc:
        print(f"vf-install: error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    target = result.target
    where = target.index_url or target.requirement
    changed = ", ".join(result.installed) or "nothing new (already installed)"
    print(f"Installed {target.project} from {target.kind} {where} into {result.python}: {changed}")
    if args.verbose:
        for name, url in result.sources.items():
            print(f"  {name} <- {url or 'unknown source'}")
    elif result.sources:
        print(f"  from: {source_summary(result.sources)} (-v lists each package)")
    for warning in result.warnings:
        print(f"vf-install: warning: {warning}", file=sys.stderr)
    for env in result.environments:
        sizes = f"train={env.num_train}, eval={env.num_eval}"
        checked = ", check_environment passed" if args.check else ""
        print(f"  {env.env_id} {env.version or ''} loads: {env.class_name} ({sizes}{checked})")
    if result.environments:
        print(f"Evaluate it with: vf-eval {result.environments[0].env_id} -m MODEL -b BASE_URL")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
