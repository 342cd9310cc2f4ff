"""``vf-serve MODEL``: the embedded OpenAI-compatible server on transformers.

The port is bound before the model loads (a taken port fails at once, in one line), the
"serving on" line is printed once the socket listens, and while requests come in a
throughput line is printed every ``--stats-every`` seconds (``--log-requests`` adds a line
per request, ``--quiet`` silences both).
"""

from __future__ import annotations

import argparse
import errno
import os
import socket
import sys
from pathlib import Path

from verifiers.cli.extras import exit_for_missing_extra
from verifiers.errors import ConfigError


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="vf-serve", description="Serve a transformers model over the OpenAI API.")
    ap.add_argument("model_dir", metavar="MODEL",
                    help="directory written by save_pretrained (e.g. by vf-tiny), or a Hugging Face model id")
    ap.add_argument("--chat-template", default=None, metavar="FILE|NAME",
                    help="Jinja chat template to render prompts with instead of the model's own: a file, Jinja text "
                         "or a shipped template (chatml-tools: Hermes-style tools in ChatML). Default: the model's own, "
                         "or for a registry model its shipped tool template (vf-model list)")
    ap.add_argument("--tool-call-parser", default="hermes", metavar="NAME",
                    help="how tool calls are read from the model's text, as vLLM names it; supported: hermes "
                         "(<tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>, the default)")
    ap.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--served-model-name", nargs="+", default=None,
                    help="names clients use in 'model' (default: the directory name)")
    ap.add_argument("--max-batch-size", type=int, default=256, help="sequences decoded together")
    ap.add_argument("--max-model-len", type=int, default=None, help="context length (default: the model's)")
    ap.add_argument("--dtype", default="auto", help="auto, float32, bfloat16 or float16")
    ap.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch threads for the model on CPU (default, unless OMP_NUM_THREADS is set: one per "
                         "usable core from 5M parameters; below, one core fewer, at least 1, for the HTTP side)")
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
    ap.add_argument("--header-timeout", type=int, default=10,
                    help="seconds a connection may take to send a request's headers before it is closed "
                    "(idle and slow clients; default 10)")
    ap.add_argument("--body-timeout", type=int, default=60,
                    help="seconds a request's body may take to arrive after its headers (slow senders; default 60)")
    ap.add_argument("--max-connections-per-client", type=int, default=256,
                    help="connections one client address may hold; a new one beyond that closes the client's "
                    "oldest idle connection (default 256)")
    ap.add_argument("--connection-reserve", type=int, default=32,
                    help="near --limit-concurrency, the oldest idle connections are closed so this many slots "
                    "stay free for new requests and /health (default 32)")
    ap.add_argument("--max-header-bytes", type=int, default=65536,
                    help="largest request head (request line + headers) accepted (default 64 KiB)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the sampler for requests without their own")
    ap.add_argument("--logprobs-mode", choices=["raw", "processed"], default="raw")
    ap.add_argument("--max-kv-tokens", type=int, default=None,
                    help="KV-cache budget in tokens, counted as rows x longest (prompt + max_tokens); requests wait "
                         "until they fit (default: max-batch-size x max-model-len, at most half the free GPU memory, "
                         "or on a CPU half the available RAM)")
    ap.add_argument("--max-prefill-tokens", type=int, default=8192,
                    help="new tokens one prefill forward may process; longer prompts are prefilled in chunks")
    ap.add_argument("--no-fast-decode", action="store_true",
                    help="decode with transformers' forward even where the engine's own step applies (same outputs)")
    ap.add_argument("--log-requests", action="store_true",
                    help="print a line per request: method, path, status, seconds, completion tokens")
    ap.add_argument("--quiet", action="store_true", help="no throughput lines (and no request lines)")
    ap.add_argument("--stats-every", type=float, default=10.0,
                    help="seconds between throughput lines while requests come in (default 10; idle: none)")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _serve(args)
    except ImportError as exc:
        return exit_for_missing_extra("vf-serve", exc)


def _serve(args: argparse.Namespace) -> int:
    from verifiers.inference.engine.loading import check_model_dir
    from verifiers.models.chat_templates import check_tool_call_parser, resolve_chat_template
    from verifiers.models.source import resolve_model

    problem = _check_limits(args)
    if problem:
        print(f"vf-serve: {problem}", file=sys.stderr)
        return 2
    try:  # before importing torch, so a typo in the path fails at once
        model_dir = resolve_model(args.model_dir, log=lambda line: print(f"vf-serve: {line}", file=sys.stderr))
        check_model_dir(model_dir, args.dtype)
        check_tool_call_parser(args.tool_call_parser)
        template, origin = resolve_chat_template(args.model_dir, args.chat_template)
    except ConfigError as exc:
        print(f"vf-serve: {exc}", file=sys.stderr)
        return 2
    try:  # bound before the model loads: a taken port fails in a second, not after the load
        from verifiers.inference.engine.devices import check_device

        check_device(args.device)
        sock = bind_socket(args.host, args.port)
    except ConfigError as exc:
        print(f"vf-serve: {exc}", file=sys.stderr)
        return 2
    if origin is not None:
        print(f"vf-serve: chat template: {origin}", file=sys.stderr)
    with sock:
        return _load_and_serve(args, model_dir, sock, template)


def _load_and_serve(args: argparse.Namespace, model_dir: Path, sock: socket.socket, template: str | None) -> int:
    import uvicorn
    from transformers.utils import logging as hf_logging

    from verifiers.gc_freeze import startup_objects_frozen
    from verifiers.inference.engine import InferenceEngine
    from verifiers.inference.engine.devices import unused_gpu_note
    from verifiers.inference.server.access_log import RequestLog, ThroughputMeter
    from verifiers.inference.server.app import DEFAULT_MAX_REQUEST_BYTES, create_app
    from verifiers.inference.server.connections import ConnectionGuard, guarded_h11_protocol

    hf_logging.disable_progress_bar()  # the server prints its own one-line banner
    try:
        engine = InferenceEngine.from_pretrained(
            model_dir, dtype=args.dtype, device=args.device, max_batch_size=args.max_batch_size,
            max_model_len=args.max_model_len, seed=args.seed, logprobs_mode=args.logprobs_mode,
            max_kv_tokens=args.max_kv_tokens, max_prefill_tokens=args.max_prefill_tokens,
            fast_decode=not args.no_fast_decode, chat_template=template,
        )
        threads = cpu_threads(args.threads, args.device, sum(p.numel() for p in engine.model.parameters()))
        if threads is not None:  # before the engine's thread runs its first step
            import torch

            torch.set_num_threads(threads)
        if engine.device.type == "cpu" and not engine.fast_decoding:  # a CPU user may wonder why it is slower
            print(f"vf-serve: decoding with {engine.decode_path}", file=sys.stderr)
        note = unused_gpu_note(args.device, "add --device cuda")
        if note:
            print(f"vf-serve: {note}", file=sys.stderr)
        default_name = Path(args.model_dir).resolve().name if Path(args.model_dir).exists() else args.model_dir
        names = args.served_model_name or [default_name]
        app = create_app(engine, names, api_key=args.api_key, reload_dir=args.reload_dir,
                         max_request_bytes=args.max_request_bytes or DEFAULT_MAX_REQUEST_BYTES)
    except ConfigError as exc:
        print(f"vf-serve: {exc}", file=sys.stderr)
        return 2
    if args.api_key is None:
        print("vf-serve: warning: no --api-key: anyone who can reach this port can generate and "
              "/weights/reload from any path this process can read" + ("" if args.reload_dir else
              " (see --reload-dir)"), file=sys.stderr)

    def say(line: str) -> None:
        print(line, flush=True)

    meter = None if args.quiet else ThroughputMeter(say, every_s=args.stats_every)
    logged = RequestLog(app, emit=say if args.log_requests else None, meter=meter)
    host, port = sock.getsockname()[:2]

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if self.started:  # listening now: a client that reads this line can connect
                say(f"serving {names[0]} on http://{_url_host(host)}:{port}/v1")

    guard = ConnectionGuard(header_timeout_s=args.header_timeout, per_client=args.max_connections_per_client,
                            limit=args.limit_concurrency, reserve=args.connection_reserve,
                            body_timeout_s=args.body_timeout)
    config = uvicorn.Config(logged, log_level="warning", access_log=False, limit_concurrency=args.limit_concurrency,
                            timeout_keep_alive=args.timeout_keep_alive, http=guarded_h11_protocol(guard),
                            h11_max_incomplete_event_size=args.max_header_bytes)
    # Frozen: no full collection walks the model and libraries while requests wait (230 ms each).
    with engine, startup_objects_frozen():
        if meter is not None:
            meter.start()
        try:
            Server(config).run(sockets=[sock])
        finally:
            if meter is not None:
                meter.stop()
    return 0


# From this many parameters a decoding step is matmuls, which scale with threads, rather than
# per-op overhead and the event loop's writes (see `cpu_threads`).
COMPUTE_BOUND_PARAMS = 5_000_000


def cpu_threads(configured: int | None, device: str, params: int) -> int | None:
    """torch threads for a model of ``params`` parameters, or None to leave torch's choice (a GPU,
    or ``OMP_NUM_THREADS`` set).

    One thread per usable core, except for a small model (under `COMPUTE_BOUND_PARAMS`), which
    gets one core fewer: its steps are short, so the event loop that writes every streamed token
    is as busy as the model, and OpenMP threads spinning against it cost more than the second
    core gives. Measured on 2 cores, 64 streams (`benchmarks/serve_vs_vllm.py --streaming`): at
    25M parameters 2 threads gave 860-980 tok/s against 590-620 with 1 (vLLM: 810); at 0.3M the
    two were level within the noise.
    """
    if configured is not None:
        return configured
    if device != "cpu" or os.environ.get("OMP_NUM_THREADS"):
        return None
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return cores if params >= COMPUTE_BOUND_PARAMS else max(1, cores - 1)


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``, or `ConfigError` naming the port and the fix.

    Listening from the start holds the port while the model loads; clients that connect
    meanwhile wait in the backlog and are answered once the server runs.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT leftovers of a previous run
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(f"port {port} on {host} is already in use (another vf-serve?): stop that "
                              "process or choose another port with --port") from None
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}; check --host and --port") from None
    return sock


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _check_limits(args: argparse.Namespace) -> str | None:
    """Option errors found before torch is imported (so they fail at once)."""
    if args.api_key is not None and not args.api_key.strip():
        return "--api-key is empty; give a non-empty key, or leave the option out to serve without one"
    if args.reload_dir is not None and not Path(args.reload_dir).is_dir():
        return f"--reload-dir {args.reload_dir} is not a directory"
    if args.threads is not None and args.threads < 1:
        return f"--threads must be >= 1, got {args.threads}"
    for name in ("max_request_bytes", "limit_concurrency", "timeout_keep_alive", "max_header_bytes",
                 "header_timeout", "body_timeout", "max_connections_per_client"):
        value = getattr(args, name)
        if value is not None and value < 1:
            return f"--{name.replace('_', '-')} must be >= 1, got {value}"
    if args.connection_reserve is not None and not 0 <= args.connection_reserve < args.limit_concurrency:
        return (f"--connection-reserve must be >= 0 and below --limit-concurrency ({args.limit_concurrency}), "
                f"got {args.connection_reserve}")
    return None


if __name__ == "__main__":
    raise SystemExit(main())
