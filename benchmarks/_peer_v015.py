"""The peer half of ``benchmarks/rollout_engine.py``: the same workloads on verifiers 0.1.5.

Runs INSIDE the peer virtualenv (``benchmarks/.venv-peer015``, built by
``rollout_engine.py``), never in the project's own environment: there,
``import verifiers`` is the 0.1.5 release from PyPI.

It reads one JSON object on stdin (written by ``rollout_engine.py``)::

    {"servers": {"fast": "http://127.0.0.1:P/v1", "slow": "http://127.0.0.1:Q/v1"},
     "model": "scripted",
     "rows": {"single_turn": [{"question": ..., "answer": ...}, ...], "tool": [...]},
     "plan": [{"key": ..., "workload": ..., "server": ..., "c": ..., "n": ...,
               "reps": ..., "warmup": ..., "warmup_s": ..., "turns": ...}, ...]}

and measures every plan entry the way a 0.1.5 user runs rollouts: the env's own
dataset, ``await env.a_generate(dataset, client=AsyncOpenAI(...), model=...,
max_concurrent=C)`` (0.1.5's async entry point: one asyncio task per rollout, a
semaphore of ``max_concurrent`` around generation and another around scoring,
interleaved scoring, a tqdm progress bar on stderr) and the openai SDK's default
client (httpx transport, default connection limits) with ``max_retries=0``.

Progress goes to stdout as plain lines; the LAST stdout line is one JSON object
``{"version": "0.1.5", "results": {key: {...}}, "errors": [...]}``.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import sys
import time
import traceback
import urllib.request
from typing import Any

# Never pick up the project's own `verifiers` package from the checkout (e.g. when
# started with the repository root as the working directory or on PYTHONPATH).
_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _REPO_ROOT]

import openai  # noqa: E402
from datasets import Dataset  # noqa: E402

import verifiers as vf  # noqa: E402

MAX_ERROR_SAMPLES = 5


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first integer.
        b: The second integer.

    Returns:
        The sum of a and b.
    """
    return a + b


def exact_match(completion, answer) -> float:
    """1.0 when the final message's text is exactly the answer."""
    if not completion:
        return 0.0
    last = completion[-1]
    content = last.get("content") if isinstance(last, dict) else getattr(last, "content", None)
    return 1.0 if content == answer else 0.0


def build_env(workload: str, rows: list[dict[str, str]]) -> Any:
    dataset = Dataset.from_list(rows)
    rubric = vf.Rubric(funcs=[exact_match])
    if workload == "single_turn":
        return vf.SingleTurnEnv(dataset=dataset, rubric=rubric)
    if workload == "tool":
        return vf.ToolEnv(tools=[add], dataset=dataset, rubric=rubric, max_turns=4)
    raise ValueError(f"unknown workload {workload!r}")


def server_stats(base_url: str) -> dict[str, int]:
    root = base_url.removesuffix("/v1")
    with urllib.request.urlopen(f"{root}/stats", timeout=10) as resp:
        return json.loads(resp.read())


def check(out: Any, n: int, turns: int) -> tuple[int, list[str]]:
    """Count rollouts that did not finish correctly (wrong reward or wrong number of turns)."""
    bad, samples = 0, []
    if len(out.reward) != n:
        return n, [f"got {len(out.reward)} results for {n} rollouts"]
    for i, (reward, state) in enumerate(zip(out.reward, out.state, strict=True)):
        n_turns = len(state.get("responses") or [])
        if reward != 1.0 or n_turns != turns:
            bad += 1
            if len(samples) < MAX_ERROR_SAMPLES:
                samples.append(
                    f"rollout {i}: reward={reward} turns={n_turns} completion={out.completion[i]!r:.200}"
                )
    return bad, samples


async def run_once(env: Any, data: Any, client: openai.AsyncOpenAI, model: str, c: int) -> Any:
    return await env.a_generate(data, client=client, model=model, max_concurrent=c)


async def measure(entry: dict[str, Any], env: Any, base_url: str, model: str) -> dict[str, Any]:
    c, n, reps, turns = entry["c"], entry["n"], entry["reps"], entry["turns"]
    client = openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0)
    data = env.dataset.select(range(n))
    warm = env.dataset.select(range(min(entry["warmup"], len(env.dataset))))
    result: dict[str, Any] = {"n": n, "c": c, "reps": reps, "errors": 0, "error_samples": []}
    walls: list[float] = []
    cpus: list[float] = []
    try:
        warm_until = time.perf_counter() + entry["warmup_s"]
        while True:  # like rollout_engine.py: until the connection pool is in its steady state
            await run_once(env, warm, client, model, c)
            if time.perf_counter() >= warm_until:
                break
        for _ in range(reps):
            before = server_stats(base_url)
            gc.collect()
            cpu0 = time.process_time()
            t0 = time.perf_counter()
            try:
                out = await run_once(env, data, client, model, c)
            except Exception as exc:  # 0.1.5 lets a failed request abort the whole batch
                wall = time.perf_counter() - t0
                result["errors"] += n
                result["error_samples"].append(f"a_generate raised {type(exc).__name__}: {exc}"[:500])
                continue
            wall = time.perf_counter() - t0
            cpu = time.process_time() - cpu0
            after = server_stats(base_url)
            bad, samples = check(out, n, turns)
            server_errors = after["n_errors"] - before["n_errors"]
            requests = after["n_requests"] - before["n_requests"]
            if requests != n * turns:
                samples.append(f"server saw {requests} requests, expected {n * turns}")
                bad = max(bad, 1)
            if server_errors:
                samples.append(f"server reported {server_errors} errors")
            result["errors"] += bad + server_errors
            result["error_samples"].extend(samples[: MAX_ERROR_SAMPLES - len(result["error_samples"])])
            walls.append(wall)
            cpus.append(cpu)
            del out
    finally:
        await client.close()
    if walls:
        wall = min(walls)
        result.update(
            wall_s=wall,
            rps=n / wall,
            cpu_ms=1000.0 * min(cpus) / n,
            all_rps=[n / w for w in walls],
        )
    return result


async def main_async(config: dict[str, Any]) -> dict[str, Any]:
    model = config["model"]
    servers = config["servers"]
    envs = {wl: build_env(wl, rows) for wl, rows in config["rows"].items()}
    results: dict[str, Any] = {}
    errors: list[str] = []
    for entry in config["plan"]:
        key = entry["key"]
        try:
            res = await measure(entry, envs[entry["workload"]], servers[entry["server"]], model)
        except Exception as exc:
            errors.append(f"{key}: {type(exc).__name__}: {exc}")
            traceback.print_exc(file=sys.stderr)
            res = {"errors": entry["n"], "error_samples": [f"{type(exc).__name__}: {exc}"[:500]]}
        results[key] = res
        rps = res.get("rps")
        line = f"peer 0.1.5  {key:<22} C={entry['c']:<4} N={entry['n']:<5}"
        if rps is not None:
            line += f" {rps:8.1f} rollouts/s  {res['cpu_ms']:6.2f} CPU-ms/rollout  wall {res['wall_s']:.3f}s"
        line += f"  errors={res['errors']}"
        print(line, flush=True)
        for s in res.get("error_samples", []):
            print(f"    ! {s}", flush=True)
    return {"version": vf.__version__, "openai": openai.__version__, "results": results, "errors": errors}


def main() -> None:
    config = json.loads(sys.stdin.read())
    if vf.__version__ != "0.1.5":
        raise SystemExit(
            f"expected verifiers 0.1.5 in the peer venv, found {vf.__version__} at {vf.__file__}"
        )
    out = asyncio.run(main_async(config))
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
