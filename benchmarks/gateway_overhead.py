"""What the interception gateway costs: agent-program rollouts/s through it vs straight to the server.

    python benchmarks/gateway_overhead.py                  # C=64, 256 program runs, 3 rounds
    python benchmarks/gateway_overhead.py --concurrency 16 --rollouts 128

The upstream is `ScriptedServer` in its own process (`ScriptedServer.spawn`). The agent program
is a real process per rollout, as under `AgentEnv`: a stdlib-only tool-loop script making a
3-call conversation (each call resends the history plus the reply). ``--concurrency`` programs
run at a time. Direct: the program's ``OPENAI_BASE_URL`` is the scripted server. Gateway: each
run has its own gateway session (URL + secret), and this process's event loop answers every
call through the environment's client (``vf.make_client``) and records it with its token ids,
as `AgentEnv` does; the same spawning code runs both arms, so only the URL differs. Rounds
alternate direct/gateway so machine load hits both alike; the ratio is of the medians
(target, issue 28: >= 0.9 at C=64).

A second figure isolates the gateway's own cost per call, without program start-ups: one load
generator process keeps ``--concurrency`` conversations going through the gateway, and straight
to the server, and ``ms_per_call_added`` is the difference in per-call latency at that load.

The LAST stdout line is one JSON object: ``direct_rps``, ``gateway_rps``, ``ratio``,
``calls_per_s_direct``, ``calls_per_s_gateway``, ``ms_per_call_added``, ``load_avg``, ``targets_met``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from typing import Any

PROGRAM = r"""
import json, os, urllib.request
url, key = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
messages = [{"role": "user", "content": "look up A"}]
for turn in range(3):
    req = urllib.request.Request(url + "/chat/completions", data=json.dumps({"model": "m", "messages": messages}).encode(),
                                 headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        reply = json.loads(resp.read())["choices"][0]["message"]
    messages = messages + [reply, {"role": "user", "content": f"next {turn}"}]
print(reply["content"])
"""

LOADER = r"""
import asyncio, json, sys, time
import aiohttp

async def rollout(http, url, key, sem):
    async with sem:
        messages = [{"role": "user", "content": "look up A"}]
        for turn in range(3):
            async with http.post(url + "/chat/completions", headers={"Authorization": "Bearer " + key},
                                 json={"model": "m", "messages": messages}) as resp:
                body = await resp.json()
                if resp.status != 200:
                    raise SystemExit(f"HTTP {resp.status}: {body}")
            messages = messages + [body["choices"][0]["message"], {"role": "user", "content": f"next {turn}"}]

async def main():
    targets = json.loads(sys.stdin.read())
    sem = asyncio.Semaphore(int(sys.argv[1]))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        t = time.perf_counter()
        await asyncio.gather(*(rollout(http, u, k, sem) for u, k in targets))
        print(json.dumps({"seconds": time.perf_counter() - t}))

asyncio.run(main())
"""


async def _programs(targets: list[tuple[str, str]], concurrency: int) -> float:
    """Seconds to run one program process per target, ``concurrency`` at a time."""
    sem = asyncio.Semaphore(concurrency)

    async def one(url: str, key: str) -> None:
        async with sem:
            env = {"PATH": os.environ.get("PATH", ""), "OPENAI_BASE_URL": url, "OPENAI_API_KEY": key}
            proc = await asyncio.create_subprocess_exec(sys.executable, "-S", "-c", PROGRAM, env=env,
                                                        stdout=asyncio.subprocess.PIPE,
                                                        stderr=asyncio.subprocess.PIPE)
            out, err = await proc.communicate()
            if proc.returncode != 0 or not out.strip():
                raise RuntimeError(f"the program failed: {err.decode()[-1500:]}")

    t = time.perf_counter()
    await asyncio.gather(*(one(u, k) for u, k in targets))
    return time.perf_counter() - t


async def _loader(targets: list[tuple[str, str]], concurrency: int) -> float:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", LOADER, str(concurrency), stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate(json.dumps(targets).encode())
    if proc.returncode != 0:
        raise RuntimeError(f"load generator failed: {err.decode()[-2000:]}")
    return float(json.loads(out.decode().strip().splitlines()[-1])["seconds"])


async def _round(runner: Any, base_url: str, client: Any, n: int, concurrency: int, via_gateway: bool) -> float:
    """Rollouts per second of one round (``runner``: `_programs` or `_loader`)."""
    from verifiers.gateway import get_gateway

    if not via_gateway:
        return n / await runner([(base_url, "EMPTY")] * n, concurrency)
    gateway = get_gateway()
    sessions = [gateway.open_session(client, "m", {"max_tokens": 16}) for _ in range(n)]
    seconds = await runner([(s.base_url, s.secret) for s in sessions], concurrency)
    recorded = sum(len(s.turn_tokens()) for s in sessions)
    for s in sessions:
        gateway.close_session(s)
    if recorded != 3 * n:
        raise RuntimeError(f"the gateway recorded {recorded} calls with token ids, expected {3 * n}")
    return n / seconds


async def _alternate(runner: Any, base_url: str, client: Any, n: int, args: argparse.Namespace
                     ) -> tuple[list[float], list[float]]:
    direct: list[float] = []
    gateway: list[float] = []
    for _ in range(args.rounds):
        direct.append(await _round(runner, base_url, client, n, args.concurrency, False))
        gateway.append(await _round(runner, base_url, client, n, args.concurrency, True))
    return direct, gateway


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    import verifiers as vf
    from verifiers.testing import ScriptedReply, ScriptedServer, ServerScript

    server = ScriptedServer.spawn(ServerScript(replies=[ScriptedReply(content="the value is 42")]))
    client = vf.make_client(base_url=server.base_url, max_retries=0)
    try:
        await _round(_loader, server.base_url, client, 64, args.concurrency, True)  # warm-up
        prog_d, prog_g = await _alternate(_programs, server.base_url, client, args.rollouts, args)
        load_d, load_g = await _alternate(_loader, server.base_url, client, args.loader_rollouts, args)
    finally:
        await client.close()
        server.stop()
    d, g = statistics.median(prog_d), statistics.median(prog_g)
    ld, lg = statistics.median(load_d), statistics.median(load_g)
    return {
        "concurrency": args.concurrency,
        "calls_per_rollout": 3,
        "direct_rps": round(d, 1),
        "gateway_rps": round(g, 1),
        "ratio": round(g / d, 3),
        "direct_rounds": [round(x, 1) for x in prog_d],
        "gateway_rounds": [round(x, 1) for x in prog_g],
        "calls_per_s_direct": round(3 * ld, 1),
        "calls_per_s_gateway": round(3 * lg, 1),
        "ms_per_call_added": round(1000 * args.concurrency * (1 / lg - 1 / ld) / 3, 2),
        "load_avg": round(os.getloadavg()[0], 2),
        "targets_met": g / d >= 0.9,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--rollouts", type=int, default=256, help="program runs per round and arm")
    ap.add_argument("--loader-rollouts", type=int, default=640, help="conversations per round of the load generator")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    started = time.perf_counter()
    result = asyncio.run(main_async(args))
    result["wall_s"] = round(time.perf_counter() - started, 1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
