"""``vf-serve MODEL_DIR``: the embedded OpenAI-compatible server on transformers."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from verifiers.errors import ConfigError


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="vf-serve", description="Serve a transformers model over the OpenAI API.")
    ap.add_argument("model_dir", help="directory written by save_pretrained (e.g. by vf-tiny)")
    ap.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--served-model-name", nargs="+", default=None,
                    help="names clients use in 'model' (default: the directory name)")
    ap.add_argument("--max-batch-size", type=int, default=256, help="sequences decoded together")
    ap.add_argument("--max-model-len", type=int, default=None, help="context length (default: the model's)")
    ap.add_argument("--dtype", default="auto", help="auto, float32, bfloat16 or float16")
    ap.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    ap.add_argument("--api-key", default=None,
                    help="require 'Authorization: Bearer KEY' on every request but /health. Without it, anyone who "
                         "can reach the port can generate and reload weights from any path the server can read")
    ap.add_argument("--reload-dir", default=None,
                    help="/weights/reload only reads checkpoints under this directory (others get 403)")
    ap.add_argument("--max-request-bytes", type=int, default=None,
                    help="largest request body accepted; larger ones get 413 before being read (default 2 MiB)")
    ap.add_argument("--limit-concurrency", type=int, default=1024,
                    help="open connections + tasks before new connections get 503 (default 1024)")
    ap.add_argument("--timeout-keep-alive", type=int, default=5,
                    help="seconds an idle keep-alive connection stays open (default 5)")
    ap.add_argument("--max-header-bytes", type=int, default=65536,
                    help="largest request head (request line + headers) accepted (default 64 KiB)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the sampler for requests without their own")
    ap.add_argument("--logprobs-mode", choices=["raw", "processed"], default="raw")
    ap.add_argument("--max-kv-tokens", type=int, default=None,
                    help="KV-cache budget in tokens, counted as rows x longest (prompt + max_tokens); requests wait "
                         "until they fit (default: max-batch-size x max-model-len, on a GPU at most half its free memory)")
    ap.add_argument("--max-prefill-tokens", type=int, default=8192,
                    help="new tokens one prefill forward may process; longer prompts are prefilled in chunks")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from verifiers.inference.loading import check_model_dir

    problem = _check_limits(args)
    if problem:
        print(f"vf-serve: {problem}", file=sys.stderr)
        return 2

    try:  # before importing torch, so a typo in the path fails at once
        check_model_dir(args.model_dir, args.dtype)
    except ConfigError as exc:
        print(f"vf-serve: {exc}", file=sys.stderr)
        return 2
    try:
        from verifiers.inference.engine import InferenceEngine
    except ImportError as exc:  # torch/transformers live behind the `train` extra
        print(f"vf-serve needs the train extra: pip install 'verifiers[train]' ({exc})", file=sys.stderr)
        return 2
    import uvicorn
    from transformers.utils import logging as hf_logging

    from verifiers.inference.server import DEFAULT_MAX_REQUEST_BYTES, create_app

    hf_logging.disable_progress_bar()  # the server prints its own one-line banner
    try:
        engine = InferenceEngine.from_pretrained(
            args.model_dir, dtype=args.dtype, device=args.device, max_batch_size=args.max_batch_size,
            max_model_len=args.max_model_len, seed=args.seed, logprobs_mode=args.logprobs_mode,
            max_kv_tokens=args.max_kv_tokens, max_prefill_tokens=args.max_prefill_tokens,
        )
    except ConfigError as exc:
        print(f"vf-serve: {exc}", file=sys.stderr)
        return 2
    names = args.served_model_name or [Path(args.model_dir).resolve().name]
    try:
        app = create_app(engine, names, api_key=args.api_key, reload_dir=args.reload_dir,
                         max_request_bytes=args.max_request_bytes or DEFAULT_MAX_REQUEST_BYTES)
    except ConfigError as exc:
        print(f"vf-serve: {exc}", file=sys.stderr)
        return 2
    if args.api_key is None:
        print("vf-serve: warning: no --api-key: anyone who can reach this port can generate and "
              "/weights/reload from any path this process can read" + ("" if args.reload_dir else
              " (see --reload-dir)"), file=sys.stderr)
    with engine:
        print(f"serving {names[0]} on http://{args.host}:{args.port}/v1", flush=True)
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False,
                    limit_concurrency=args.limit_concurrency, timeout_keep_alive=args.timeout_keep_alive,
                    h11_max_incomplete_event_size=args.max_header_bytes)
    return 0


def _check_limits(args: argparse.Namespace) -> str | None:
    """Option errors found before torch is imported (so they fail at once)."""
    if args.api_key is not None and not args.api_key.strip():
        return "--api-key is empty; give a non-empty key, or leave the option out to serve without one"
    if args.reload_dir is not None and not Path(args.reload_dir).is_dir():
        return f"--reload-dir {args.reload_dir} is not a directory"
    for name in ("max_request_bytes", "limit_concurrency", "timeout_keep_alive", "max_header_bytes"):
        value = getattr(args, name)
        if value is not None and value < 1:
            return f"--{name.replace('_', '-')} must be >= 1, got {value}"
    return None


if __name__ == "__main__":
    raise SystemExit(main())
