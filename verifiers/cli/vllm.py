"""``vf-vllm MODEL_DIR [--port P] [-- extra vLLM args]``: vLLM's OpenAI server, set up for RL training.

Starts vLLM on 127.0.0.1 with the dev routes, raw logprobs, prefix caching and (on a GPU) the
NCCL weight transfer (see `verifiers.inference.vllm.server`), waits until it is healthy, prints
the base URL, and stops it (and its engine processes) on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from typing import Any

from verifiers.errors import ConfigError, ServerError


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="vf-vllm",
        description="Serve a model with vLLM, configured for training with vf-train. "
                    "Arguments after `--` go to vLLM unchanged.",
    )
    ap.add_argument("model_dir", metavar="MODEL",
                    help="a directory written by save_pretrained (e.g. by vf-tiny), a .gguf file (converted once, "
                         "cached), a registry name (vf-model list) or a Hugging Face model id")
    ap.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    ap.add_argument("--port", type=int, default=8000, help="port (0 = a free one)")
    ap.add_argument("--served-model-name", default="policy",
                    help="the name clients use (vf-train's server_model_name; default policy)")
    ap.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY' on every request")
    ap.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    ap.add_argument("--dtype", default=None, help="default: the checkpoint's own dtype")
    ap.add_argument("--kv-cache-gib", type=int, default=None, help="CPU only: KV cache size (default 2)")
    ap.add_argument("--cpu-cores", default=None, help="CPU only: cores for vLLM's threads, e.g. 0 or 0-3")
    ap.add_argument("--chat-template", default=None, metavar="FILE|NAME",
                    help="handed to vLLM: a chat template file, Jinja text or a shipped template (chatml-tools); "
                         "default: the model's own, or for a registry model its shipped tool template, as vf-serve")
    ap.add_argument("--tool-call-parser", default="hermes", metavar="NAME",
                    help="handed to vLLM with --enable-auto-tool-choice (default hermes, what vf-serve parses)")
    ap.add_argument("--enable-lora", action="store_true", help="serve LoRA adapters (weight_sync = 'lora')")
    ap.add_argument("--max-lora-rank", type=int, default=16)
    ap.add_argument("--startup-timeout", type=float, default=600.0, help="seconds to wait for /health")
    ap.add_argument("--log-file", default=None, help="where vLLM's own output goes (default: a temp file)")
    return ap


def main(argv: list[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in args_in:
        i = args_in.index("--")
        args_in, extra = args_in[:i], args_in[i + 1 :]
    args = build_parser().parse_args(args_in)
    from verifiers.inference.vllm.server import VLLMServer, VLLMServerSpec
    from verifiers.models.chat_templates import vllm_chat_template
    from verifiers.models.source import resolve_model

    try:  # vLLM is given a save_pretrained directory: a GGUF or a registry name is converted first
        model_dir = str(resolve_model(args.model_dir, log=lambda line: print(f"vf-vllm: {line}", file=sys.stderr,
                                                                               flush=True)))
        template = vllm_chat_template(args.model_dir, args.chat_template)
    except ConfigError as exc:
        print(f"vf-vllm: {exc}", file=sys.stderr)
        return 2
    spec = VLLMServerSpec(
        model_dir=model_dir, host=args.host, port=args.port, served_model_name=args.served_model_name,
        api_key=args.api_key, device=args.device, dtype=args.dtype, kv_cache_gib=args.kv_cache_gib,
        cpu_cores=args.cpu_cores, enable_lora=args.enable_lora, max_lora_rank=args.max_lora_rank,
        chat_template=template, tool_call_parser=args.tool_call_parser, extra_args=extra,
    )
    try:
        server = VLLMServer(spec, log_path=args.log_file)
    except ConfigError as exc:
        print(f"vf-vllm: {exc}", file=sys.stderr)
        return 2
    def on_signal(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt  # SIGTERM stops the server the same way as Ctrl-C

    signal.signal(signal.SIGTERM, on_signal)
    print(f"vf-vllm: starting vLLM for {model_dir} (log: {server.log_path})", file=sys.stderr, flush=True)
    try:
        server.start(timeout_s=args.startup_timeout)
        print(server.base_url, flush=True)
        print(f"vf-vllm: ready; train with: vf-train CONFIG --model {args.model_dir} --base_url {server.base_url}",
              file=sys.stderr, flush=True)
        while server.proc is not None and server.proc.poll() is None:
            time.sleep(0.5)
        code = server.proc.returncode if server.proc is not None else 1
        print(f"vf-vllm: vLLM exited with code {code}; log ends:\n{server.log_tail()}", file=sys.stderr)
        return 1
    except ServerError as exc:
        print(f"vf-vllm: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("vf-vllm: stopping", file=sys.stderr, flush=True)
        return 0
    finally:
        server.stop()


if __name__ == "__main__":
    raise SystemExit(main())
