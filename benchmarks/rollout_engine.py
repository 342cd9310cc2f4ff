"""Rollout-engine benchmark: our engine vs verifiers 0.1.5 (the peer) on the same workloads.

    python benchmarks/rollout_engine.py            # full run (several minutes)
    python benchmarks/rollout_engine.py --quick    # smoke run with fewer rollouts
    python benchmarks/rollout_engine.py --no-peer  # our engine only
    python benchmarks/rollout_engine.py --profile  # cProfile of our client at C=64 (no peer)

Two scripted OpenAI-compatible servers (`ScriptedServer.spawn`, each in its own
process) answer instantly ("fast") or after 500 ms ("slow"). Both engines talk to
the SAME servers, one after the other:

* single-turn: `SingleTurnEnv`, 1,000 distinct questions, a plain `Rubric` with one
  exact-match reward; the server echoes the question (``{last_user}``).
* tool: `ToolEnv` with ``add(a, b)``; the server answers turn 0 with a tool call
  ``add {"a": 2, "b": 3}`` and turn 1 with the tool's result (``{last_message}``);
  the reward is exact match of the final text with "5", so a rollout only scores
  1 if the tool really ran.

For each workload and C in {1, 64, 256} (latency 0) we report rollouts/s (wall) and
CPU-ms per rollout of the CLIENT process (``time.process_time()`` deltas; the server
is another process), and at 500 ms latency, C = 256, N = 1,000 the efficiency
``ceil(N / C) * turns * latency / wall``. Every config is warmed up first; C=64 and
C=256 at latency 0 take the best of 2 repetitions. Clients use ``max_retries=0`` and
every rollout is checked (no error, reward 1, right number of turns, server saw
exactly N * turns requests and no errors): a run with errors is reported INVALID.

The peer runs in ``benchmarks/.venv-peer015`` (created on first use with
``python -m venv`` + pip; reused when it imports) via ``benchmarks/_peer_v015.py``.

The LAST stdout line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import json
import math
import os
import pstats
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:  # run from a checkout without an editable install
    sys.path.insert(0, str(ROOT))

import verifiers as vf  # noqa: E402
from verifiers.testing.server import ScriptedReply, ScriptedServer, ScriptedToolCall, ServerScript  # noqa: E402

PEER_VENV = HERE / ".venv-peer015"
PEER_SCRIPT = HERE / "_peer_v015.py"
PEER_REQUIREMENTS = ["verifiers==0.1.5", "openai>=1.108.1,<2", "math-verify"]
MODEL = "scripted"
LATENCY_S = 0.5
TURNS = {"single_turn": 1, "tool": 2}
MAX_ERROR_SAMPLES = 5
WARMUP_S = 6.0

# Targets the team must meet (printed as PASS/FAIL, never asserted).
TARGET_RPS_C64 = 600.0
TARGET_RATIO_C64 = 1.5
TARGET_EFFICIENCY = 0.75


# -- workloads ----------------------------------------------------------------------------


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
    return 1.0 if completion[-1].get("content") == answer else 0.0


def make_rows(workload: str, n: int) -> list[dict[str, str]]:
    """Distinct questions; identical rows go to the peer."""
    if workload == "single_turn":
        rows = []
        for i in range(n):
            q = f"Q{i}: what is {i} plus {(7 * i) % 101}? Reply with this exact line."
            rows.append({"question": q, "answer": q})
        return rows
    if workload == "tool":
        return [
            {
                "question": f"TOOL {i}: use the add tool to compute 2 + 3, then reply with the result only.",
                "answer": "5",
            }
            for i in range(n)
        ]
    raise ValueError(workload)


def server_script(latency_s: float) -> ServerScript:
    return ServerScript(
        latency_s=latency_s,
        replies=[
            # tool workload, turn 0: call add(2, 3)
            ScriptedReply(
                turn=0,
                match=r"^TOOL ",
                tool_calls=[ScriptedToolCall(name="add", arguments='{"a": 2, "b": 3}')],
            ),
            # tool workload, turn 1: answer with the tool's result
            ScriptedReply(turn=1, content="{last_message}"),
            # single-turn: echo the question
            ScriptedReply(content="{last_user}"),
        ],
    )


def build_env(workload: str, rows: list[dict[str, str]]) -> vf.Environment:
    from datasets import Dataset

    dataset = Dataset.from_list(rows)
    rubric = vf.Rubric(funcs=[exact_match])
    if workload == "single_turn":
        return vf.SingleTurnEnv(dataset=dataset, rubric=rubric)
    return vf.ToolEnv(tools=[add], dataset=dataset, rubric=rubric, max_turns=4)


def make_plan(quick: bool) -> list[dict[str, Any]]:
    """What to measure. ``warmup`` rollouts are run again and again for at least ``warmup_s``
    before measuring, so connection pools reach their steady state (httpx expires idle
    keep-alive connections after 5 s; the peer's pool is slow until it has shrunk)."""
    n = 200 if quick else 1000
    n_c1 = 50 if quick else 200
    n_eff = 256 if quick else 1000
    reps = 1 if quick else 2
    w = 0.5 if quick else WARMUP_S
    plan = []
    for wl in ("single_turn", "tool"):
        t = TURNS[wl]
        common = {"workload": wl, "turns": t, "warmup_s": w}
        plan += [
            {"key": f"{wl}_c1", "server": "fast", "c": 1, "n": n_c1, "reps": 1, "warmup": 20, **common},
            {"key": f"{wl}_c64", "server": "fast", "c": 64, "n": n, "reps": reps, "warmup": 200, **common},
            {"key": f"{wl}_c256", "server": "fast", "c": 256, "n": n, "reps": reps, "warmup": 512, **common},
            {
                "key": f"{wl}_500ms_c256",
                "server": "slow",
                "c": 256,
                "n": n_eff,
                "reps": 1,
                "warmup": 256,
                **common,
            },
        ]
    return plan


def httpx_plan(plan: list[dict[str, Any]]) -> list[dict[str, Any]]:
    wanted = {"single_turn_c64", "single_turn_500ms_c256"}
    return [{**e, "key": "httpx_" + e["key"], "transport": "httpx"} for e in plan if e["key"] in wanted]


def plain_plan(plan: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A user-built ``openai.AsyncOpenAI(base_url=...)`` (SDK default transport), as 0.1.x users
    pass it: ``plain_*`` through `as_chat_client` (which routes it to the aiohttp fast path) and
    ``plainsdk_*`` forced through the SDK's own request pipeline (the baseline, same run)."""
    wanted = {"single_turn_c64", "single_turn_500ms_c256", "tool_500ms_c256"}
    out = []
    for e in plan:
        if e["key"] in wanted:
            out.append({**e, "key": "plain_" + e["key"], "client": "plain"})
            out.append({**e, "key": "plainsdk_" + e["key"], "client": "plain_sdk"})
    return out


def build_client(entry: dict[str, Any], base_url: str) -> tuple[Any, Any]:
    """(client passed to a_generate, object to close afterwards)."""
    kind = entry.get("client", "ours")
    if kind == "ours":
        client = vf.make_client(base_url, max_retries=0, transport=entry.get("transport", "aiohttp"))
        return client, client
    import openai

    plain = openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0)
    if kind == "plain":
        return plain, plain
    from verifiers.clients.openai_client import OpenAIChatClient

    return OpenAIChatClient(plain), plain


# -- our engine ---------------------------------------------------------------------------


def server_cpu_s(server: Any) -> float | None:
    """CPU seconds used so far by a spawned server process (Linux /proc; None elsewhere)."""
    try:
        with open(f"/proc/{server.pid}/stat", encoding="ascii") as f:
            fields = f.read().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def check(results: list[Any], n: int, turns: int) -> tuple[int, list[str]]:
    bad, samples = 0, []
    if len(results) != n:
        return n, [f"got {len(results)} results for {n} rollouts"]
    for i, r in enumerate(results):
        problem = None
        if r.error is not None:
            problem = f"error {r.error}"
        elif r.reward != 1.0 or r.turns != turns or r.state.get("tool_errors") or r.scoring_errors:
            problem = (
                f"reward={r.reward} turns={r.turns} tool_errors={r.state.get('tool_errors')} "
                f"scoring_errors={r.scoring_errors} completion={r.completion!r:.200}"
            )
        if problem is not None:
            bad += 1
            if len(samples) < MAX_ERROR_SAMPLES:
                samples.append(f"rollout {i}: {problem}"[:500])
    return bad, samples


async def measure_ours(
    entry: dict[str, Any], env: vf.Environment, server: Any, profiler: cProfile.Profile | None = None
) -> dict[str, Any]:
    c, n, reps, turns = entry["c"], entry["n"], entry["reps"], entry["turns"]
    client, closer = build_client(entry, server.base_url)
    data = env.dataset.subset(n)
    warm = env.dataset.subset(min(entry["warmup"], len(env.dataset)))
    result: dict[str, Any] = {"n": n, "c": c, "reps": reps, "errors": 0, "error_samples": []}
    walls: list[float] = []
    cpus: list[float] = []
    server_cpus: list[float] = []
    try:
        warm_until = time.perf_counter() + entry["warmup_s"]
        while True:
            await env.a_generate(warm, client, MODEL, max_concurrent=c)
            if time.perf_counter() >= warm_until:
                break
        for _ in range(reps):
            before = server.stats()
            gc.collect()
            if profiler is not None:
                profiler.enable()
            server_cpu0 = server_cpu_s(server)
            cpu0 = time.process_time()
            t0 = time.perf_counter()
            out = await env.a_generate(data, client, MODEL, max_concurrent=c)
            wall = time.perf_counter() - t0
            cpu = time.process_time() - cpu0
            server_cpu1 = server_cpu_s(server)
            if profiler is not None:
                profiler.disable()
            if server_cpu0 is not None and server_cpu1 is not None:
                server_cpus.append(server_cpu1 - server_cpu0)
            after = server.stats()
            bad, samples = check(out.results, n, turns)
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
        await closer.close()
    wall = min(walls)
    result.update(wall_s=wall, rps=n / wall, cpu_ms=1000.0 * min(cpus) / n, all_rps=[n / w for w in walls])
    if server_cpus:  # diagnostic: is the server, not the client, the bottleneck?
        result["server_cpu_ms"] = 1000.0 * min(server_cpus) / n
    return result


def progress_line(who: str, entry: dict[str, Any], res: dict[str, Any]) -> str:
    line = f"{who:<11} {entry['key']:<28} C={entry['c']:<4} N={entry['n']:<5}"
    if res.get("rps") is not None:
        line += (
            f" {res['rps']:8.1f} rollouts/s  {res['cpu_ms']:6.2f} CPU-ms/rollout  wall {res['wall_s']:.3f}s"
        )
        if res.get("server_cpu_ms") is not None:
            line += f"  (server {res['server_cpu_ms']:.2f} CPU-ms/rollout)"
    return line + f"  errors={res['errors']}"


async def run_ours(
    plan: list[dict[str, Any]], rows: dict[str, list[dict[str, str]]], servers: dict[str, Any]
) -> dict[str, dict[str, Any]]:
    envs = {wl: build_env(wl, r) for wl, r in rows.items()}
    results = {}
    for entry in plan:
        res = await measure_ours(entry, envs[entry["workload"]], servers[entry["server"]])
        results[entry["key"]] = res
        print(progress_line("ours", entry, res), flush=True)
        for s in res["error_samples"]:
            print(f"    ! {s}", flush=True)
    return results


# -- the peer -----------------------------------------------------------------------------


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PYTHONNOUSERSITE"] = "1"
    return env


def peer_python() -> Path:
    return PEER_VENV / "bin" / "python"


def ensure_peer_venv() -> Path:
    """Create (or reuse) the 0.1.5 virtualenv and return its interpreter."""
    py = peer_python()
    probe = (
        "import verifiers, openai, datasets; assert verifiers.__version__ == '0.1.5', verifiers.__version__"
    )
    if py.exists():
        ok = subprocess.run([str(py), "-c", probe], env=_clean_env(), cwd=str(HERE), capture_output=True)
        if ok.returncode == 0:
            return py
        print(f"peer venv at {PEER_VENV} does not import verifiers 0.1.5; reinstalling", flush=True)
    else:
        print(
            f"creating the peer venv at {PEER_VENV} (verifiers 0.1.5 from PyPI; takes a few minutes)",
            flush=True,
        )
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", str(PEER_VENV)], check=True, env=_clean_env())
    subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", *PEER_REQUIREMENTS],
        check=True,
        env=_clean_env(),
    )
    subprocess.run([str(py), "-c", probe], check=True, env=_clean_env(), cwd=str(HERE))
    return py


def run_peer(
    plan: list[dict[str, Any]], rows: dict[str, list[dict[str, str]]], servers: dict[str, Any]
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    py = ensure_peer_venv()
    config = {
        "servers": {name: s.base_url for name, s in servers.items()},
        "model": MODEL,
        "rows": rows,
        "plan": plan,
    }
    proc = subprocess.Popen(
        [str(py), str(PEER_SCRIPT)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_clean_env(),
        cwd=str(HERE),
    )
    stdout, stderr = proc.communicate(json.dumps(config))
    lines = [ln for ln in stdout.splitlines() if ln.strip()]
    for ln in lines[:-1]:
        print(ln, flush=True)
    try:
        out = json.loads(lines[-1]) if proc.returncode == 0 and lines else None
    except json.JSONDecodeError:
        out = None
    if out is None:
        tail = "\n".join(stderr.splitlines()[-30:])
        print(f"peer run FAILED (exit {proc.returncode}); stderr tail:\n{tail}", flush=True)
        return {}, [f"peer exited with {proc.returncode}"]
    return out["results"], out.get("errors", [])


# -- report -------------------------------------------------------------------------------


def efficiency(res: dict[str, Any] | None, entry: dict[str, Any]) -> float | None:
    if not res or res.get("wall_s") is None:
        return None
    ideal = math.ceil(entry["n"] / entry["c"]) * entry["turns"] * LATENCY_S
    return ideal / res["wall_s"]


def figures(
    results: dict[str, dict[str, Any]], plan: list[dict[str, Any]], prefix: str = ""
) -> dict[str, Any]:
    fig: dict[str, Any] = {}
    for entry in plan:
        res = results.get(entry["key"]) or {}
        key, wl = entry["key"], entry["workload"]
        if "500ms" in key:
            name = "efficiency_500ms_c256" if wl == "single_turn" else "tool_efficiency_500ms_c256"
            for tag in ("httpx_", "plain_", "plainsdk_"):
                if key.startswith(tag):
                    name = tag + name
            fig[prefix + name] = efficiency(res, entry)
            fig[prefix + key.replace("_500ms_", "_wall_s_500ms_")] = res.get("wall_s")
            fig[prefix + key.replace("_500ms_", "_cpu_ms_500ms_")] = res.get("cpu_ms")
            if "server_cpu_ms" in res:
                fig[prefix + key.replace("_500ms_", "_server_cpu_ms_500ms_")] = res["server_cpu_ms"]
        else:
            head, _, c = key.rpartition("_")
            fig[f"{prefix}{head}_rps_{c}"] = res.get("rps")
            fig[f"{prefix}{head}_cpu_ms_{c}"] = res.get("cpu_ms")
            if "server_cpu_ms" in res:
                fig[f"{prefix}{head}_server_cpu_ms_{c}"] = res["server_cpu_ms"]
    return fig


def _fmt(v: Any, spec: str = "8.1f") -> str:
    if v is None:
        return "—".rjust(int(spec.split(".")[0] or 1))
    return format(v, spec)


def _ratio(a: Any, b: Any) -> float | None:
    return a / b if a is not None and b else None


def print_report(fig: dict[str, Any], peer: bool) -> None:
    print()
    print("== throughput, latency 0 (rollouts/s wall; CPU-ms per rollout of the client process) ==")
    print(
        f"{'workload':<12} {'C':>4} {'ours rps':>9} {'peer rps':>9} {'ratio':>6} {'ours cpu':>9} {'peer cpu':>9}"
    )
    for wl in ("single_turn", "tool"):
        for c in (1, 64, 256):
            ours, theirs = fig.get(f"{wl}_rps_c{c}"), fig.get(f"peer_{wl}_rps_c{c}")
            print(
                f"{wl:<12} {c:>4} {_fmt(ours, '9.1f')} {_fmt(theirs, '9.1f')} {_fmt(_ratio(ours, theirs), '6.2f')} "
                f"{_fmt(fig.get(f'{wl}_cpu_ms_c{c}'), '9.2f')} {_fmt(fig.get(f'peer_{wl}_cpu_ms_c{c}'), '9.2f')}"
            )
    print(
        f"{'single_turn':<12} {64:>4} {_fmt(fig.get('httpx_single_turn_rps_c64'), '9.1f')} {'':>9} {'':>6} "
        f"{_fmt(fig.get('httpx_single_turn_cpu_ms_c64'), '9.2f')}   <- ours with transport='httpx'"
    )
    print()
    print(
        "== efficiency at 500 ms latency, C=256 (ideal = ceil(N/C) * turns * 0.5 s; efficiency = ideal / wall) =="
    )
    print(f"{'workload':<12} {'ours':>6} {'peer':>6} {'ratio':>6} {'ours wall':>10} {'peer wall':>10}")
    for wl, name in (("single_turn", "efficiency_500ms_c256"), ("tool", "tool_efficiency_500ms_c256")):
        ours, theirs = fig.get(name), fig.get("peer_" + name)
        print(
            f"{wl:<12} {_fmt(ours, '6.3f')} {_fmt(theirs, '6.3f')} {_fmt(_ratio(ours, theirs), '6.2f')} "
            f"{_fmt(fig.get(f'{wl}_wall_s_500ms_c256'), '10.3f')} {_fmt(fig.get(f'peer_{wl}_wall_s_500ms_c256'), '10.3f')}"
        )
    print(
        f"{'single_turn':<12} {_fmt(fig.get('httpx_efficiency_500ms_c256'), '6.3f')}"
        f" {'':>6} {'':>6} {_fmt(fig.get('httpx_single_turn_wall_s_500ms_c256'), '10.3f')}   <- ours with transport='httpx'"
    )
    for wl, name in (("single_turn", "efficiency_500ms_c256"), ("tool", "tool_efficiency_500ms_c256")):
        for tag, what in (("plain_", "plain AsyncOpenAI(base_url=...)"), ("plainsdk_", "the same, forced through the SDK")):
            print(
                f"{wl:<12} {_fmt(fig.get(tag + name), '6.3f')} {'':>6} {'':>6} "
                f"{_fmt(fig.get(f'{tag}{wl}_wall_s_500ms_c256'), '10.3f')}   <- {what}"
            )
    print(
        f"single_turn C=64 rps: plain AsyncOpenAI {_fmt(fig.get('plain_single_turn_rps_c64'), '.1f')}, "
        f"forced through the SDK {_fmt(fig.get('plainsdk_single_turn_rps_c64'), '.1f')}"
    )
    print()
    rps = fig.get("single_turn_rps_c64")
    ratio = fig.get("ratio_single_turn_rps_c64")
    eff = fig.get("efficiency_500ms_c256")

    def verdict(ok: bool | None) -> str:
        return "n/a " if ok is None else ("PASS" if ok else "FAIL")

    print(
        f"{verdict(None if rps is None else rps >= TARGET_RPS_C64)} target: single-turn rps at C=64 >= {TARGET_RPS_C64:g} (got {_fmt(rps, '.1f').strip()})"
    )
    if peer:
        print(
            f"{verdict(None if ratio is None else ratio >= TARGET_RATIO_C64)} target: single-turn rps at C=64 >= {TARGET_RATIO_C64:g}x the peer (got {_fmt(ratio, '.2f').strip()}x)"
        )
    else:
        print("n/a  target: single-turn rps at C=64 >= 1.5x the peer (--no-peer)")
    print(
        f"{verdict(None if eff is None else eff >= TARGET_EFFICIENCY)} target: single-turn efficiency at 500 ms, C=256 >= {TARGET_EFFICIENCY:g} (got {_fmt(eff, '.3f').strip()})"
    )
    plain_eff = fig.get("plain_efficiency_500ms_c256")
    print(
        f"{verdict(None if plain_eff is None else plain_eff >= TARGET_EFFICIENCY)} target: plain AsyncOpenAI single-turn efficiency at 500 ms, C=256 >= {TARGET_EFFICIENCY:g} (got {_fmt(plain_eff, '.3f').strip()})"
    )
    tool_eff = fig.get("tool_efficiency_500ms_c256")
    print(
        f"{verdict(None if tool_eff is None else tool_eff >= TARGET_EFFICIENCY)} target: tool efficiency at 500 ms, C=256 >= {TARGET_EFFICIENCY:g} (got {_fmt(tool_eff, '.3f').strip()})"
    )


# -- profile mode -------------------------------------------------------------------------


async def profile_ours(rows: dict[str, list[dict[str, str]]], servers: dict[str, Any], n: int) -> None:
    for wl in ("single_turn", "tool"):
        env = build_env(wl, rows[wl])
        entry = {
            "key": f"{wl}_c64",
            "workload": wl,
            "server": "fast",
            "c": 64,
            "n": n,
            "reps": 1,
            "warmup": 200,
            "warmup_s": 2.0,
            "turns": TURNS[wl],
        }
        prof = cProfile.Profile()
        res = await measure_ours(entry, env, servers["fast"], profiler=prof)
        print(progress_line("ours+prof", entry, res))
        for sort in ("tottime", "cumulative"):
            buf = io.StringIO()
            stats = pstats.Stats(prof, stream=buf)
            stats.sort_stats(sort).print_stats(30)
            print(f"--- {wl}, C=64, N={n}: top 30 by {sort} (seconds for all {n} rollouts) ---")
            print("\n".join(ln for ln in buf.getvalue().splitlines() if ln.strip())[:12000])


# -- main ---------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rollouts (smoke run)")
    parser.add_argument("--no-peer", action="store_true", help="skip verifiers 0.1.5")
    parser.add_argument(
        "--plain-only", action="store_true", help="only the plain AsyncOpenAI cases (no peer)"
    )
    parser.add_argument(
        "--profile", action="store_true", help="cProfile our client at C=64 and exit (no peer)"
    )
    args = parser.parse_args(argv)

    plan = make_plan(args.quick)
    n_rows = max(e["n"] for e in plan)
    rows = {wl: make_rows(wl, n_rows) for wl in TURNS}
    t_start = time.perf_counter()
    with (
        ScriptedServer.spawn(server_script(0.0)) as fast,
        ScriptedServer.spawn(server_script(LATENCY_S)) as slow,
    ):
        servers = {"fast": fast, "slow": slow}
        if args.profile:
            asyncio.run(profile_ours(rows, servers, 200 if args.quick else 1000))
            return 0
        versus = "" if args.no_peer else " vs 0.1.5 (peer)"
        print(
            f"verifiers {vf.__version__} (ours){versus}; {os.cpu_count()} CPUs; python {sys.version.split()[0]}; "
            f"{'quick' if args.quick else 'full'} run",
            flush=True,
        )
        ours_plan = plain_plan(plan) if args.plain_only else plan + httpx_plan(plan) + plain_plan(plan)
        if args.plain_only:
            args.no_peer = True
        ours = asyncio.run(run_ours(ours_plan, rows, servers))
        peer_results: dict[str, dict[str, Any]] = {}
        peer_errors: list[str] = []
        if not args.no_peer:
            peer_results, peer_errors = run_peer(plan, rows, servers)

    fig: dict[str, Any] = {"quick": args.quick, "version": vf.__version__}
    fig.update(figures(ours, ours_plan))
    if not args.no_peer:
        fig.update(figures(peer_results, plan, prefix="peer_"))
        for name in (
            "single_turn_rps_c64",
            "tool_rps_c64",
            "efficiency_500ms_c256",
            "tool_efficiency_500ms_c256",
        ):
            fig["ratio_" + name] = _ratio(fig.get(name), fig.get("peer_" + name))
        fig["ratio_single_turn_rps_c256"] = _ratio(
            fig.get("single_turn_rps_c256"), fig.get("peer_single_turn_rps_c256")
        )
        fig["ratio_tool_rps_c256"] = _ratio(fig.get("tool_rps_c256"), fig.get("peer_tool_rps_c256"))
    ours_errors = sum(r["errors"] for r in ours.values())
    peer_err_count = sum(r.get("errors", 0) for r in peer_results.values()) + len(peer_errors)
    if not args.no_peer and len(peer_results) < len(plan):
        peer_err_count += len(plan) - len(peer_results)
    fig["errors"] = ours_errors
    fig["peer_errors"] = None if args.no_peer else peer_err_count
    fig["valid"] = ours_errors == 0 and (args.no_peer or peer_err_count == 0)
    fig["elapsed_s"] = round(time.perf_counter() - t_start, 1)

    print_report(fig, peer=not args.no_peer)
    if not fig["valid"]:
        print(
            f"INVALID: {ours_errors} failed rollouts (ours), {fig['peer_errors']} (peer); see the '!' lines above"
        )
    print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in fig.items()}), flush=True)
    return 0 if fig["valid"] else 1


if __name__ == "__main__":
    sys.exit(main())
