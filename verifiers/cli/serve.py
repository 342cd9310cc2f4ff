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
    ap.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY' on every request")
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

    from verifiers.inference.server import create_app

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
    with engine:
        print(f"serving {names[0]} on http://{args.host}:{args.port}/v1", flush=True)
        uvicorn.run(create_app(engine, names, api_key=args.api_key), host=args.host, port=args.port,
                    log_level="warning", access_log=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
