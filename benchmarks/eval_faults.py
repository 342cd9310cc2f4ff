"""Fault benchmark for vf-eval: failing requests, hangs, ``kill -9`` and ``--resume``.

A scripted OpenAI-compatible server (its own process) fails 20% of requests with
HTTP 500 or 429 and hangs on 2% of them far past the per-rollout timeout. vf-eval
runs as a real subprocess with ``--max-retries 0`` so every failure is recorded as
data rather than retried away, and ``--timeout`` turns each hang into a
``RolloutTimeoutError``.

Two phases, each on the bundled ``reverse-text`` environment (400 examples x 5):

1. full run: every rollout must be in results.jsonl exactly once, errors counted by type;
2. ``kill -9`` once about half of the rollouts are saved, then ``vf-eval ... --resume``:
   the run must end with no duplicate and no missing rollout, and the resume must send
   exactly as many requests as it had rollouts left to run.

The last line printed is one JSON object (``rollouts``, ``unique``, ``errors_by_type``,
``missing_after_resume``, ``duplicates_after_resume`` plus details). Exit status 0 when
every check holds. About a minute on 2 cores::

    . .venv/bin/activate && python benchmarks/eval_faults.py
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from verifiers.testing import ScriptedReply, ScriptedServer, ServerScript  # noqa: E402

ERROR_RATE = 0.20  # of all requests: 500 or 429, equally likely
HANG_SHARE = 0.02  # of all requests
EXAMPLES, PER_EXAMPLE = 400, 5


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    paths = [str(REPO), str(REPO / "environments" / "reverse_text"), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    return env


def vf_eval_cmd() -> list[str]:
    script = Path(sys.executable).parent / "vf-eval"
    return [str(script)] if script.exists() else [sys.executable, "-m", "verifiers.cli.eval"]


def eval_args(base_url: str, out: Path, concurrency: int, timeout_s: float) -> list[str]:
    env_args = json.dumps({"num_eval_examples": EXAMPLES, "num_train_examples": 0})
    return [
        "reverse-text", "-a", env_args, "-m", "scripted", "-b", base_url,
        "-n", str(EXAMPLES), "-r", str(PER_EXAMPLE), "-c", str(concurrency),
        "--timeout", str(timeout_s), "--max-retries", "0", "-o", str(out), "--no-progress",
    ]  # fmt: skip


def run_dir_of(out: Path) -> Path | None:
    found = sorted(p.parent for p in (out / "evals").glob("*/*/metadata.json"))
    return found[0] if found else None


def read_keys(run_dir: Path) -> tuple[Counter[tuple[int, int]], Counter[str], int]:
    """Rollout keys (with multiplicity), errors by type, and unparseable lines."""
    keys: Counter[tuple[int, int]] = Counter()
    errors: Counter[str] = Counter()
    bad = 0
    for line in (run_dir / "results.jsonl").read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            bad += 1
            continue
        keys[(row["example_id"], row["rollout_index"])] += 1
        if row.get("error"):
            errors[row["error"]["type"]] += 1
    return keys, errors, bad


def check_keys(keys: Counter[tuple[int, int]], expected: set[tuple[int, int]]) -> dict[str, int]:
    return {
        "unique": len(keys),
        "missing": len(expected - set(keys)),
        "duplicates": sum(c - 1 for c in keys.values() if c > 1),
        "unexpected": len(set(keys) - expected),
    }


def full_run(
    server: Any, work: Path, args: argparse.Namespace, expected: set[tuple[int, int]]
) -> dict[str, Any]:
    out = work / "full"
    t0 = time.perf_counter()
    proc = subprocess.run(
        [*vf_eval_cmd(), *eval_args(server.base_url, out, args.concurrency, args.timeout)],
        env=child_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    wall = time.perf_counter() - t0
    run_dir = run_dir_of(out)
    if proc.returncode != 0 or run_dir is None:
        raise SystemExit(f"full run failed ({proc.returncode}): {proc.stderr[-2000:]}")
    keys, errors, bad = read_keys(run_dir)
    meta = json.loads((run_dir / "metadata.json").read_text())
    return {
        **check_keys(keys, expected),
        "bad_lines": bad,
        "errors_by_type": dict(errors.most_common()),
        "error_share": round(sum(errors.values()) / max(1, len(keys)), 4),
        "metadata_errors_match": meta["errors_by_type"] == dict(errors),
        "status": meta["status"],
        "wall_s": round(wall, 2),
    }


def kill_and_resume(
    server: Any, work: Path, args: argparse.Namespace, expected: set[tuple[int, int]]
) -> dict[str, Any]:
    out = work / "killed"
    cmd = [*vf_eval_cmd(), *eval_args(server.base_url, out, args.concurrency, args.timeout)]
    proc = subprocess.Popen(
        cmd, env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    half = len(expected) // 2
    run_dir = None
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            run_dir = run_dir_of(out)
            results = run_dir / "results.jsonl" if run_dir is not None else None
            if results is not None and results.exists() and results.read_bytes().count(b"\n") >= half:
                break
            time.sleep(0.005)
        if proc.poll() is not None:
            raise SystemExit(
                f"vf-eval ended before it could be killed ({proc.returncode}): {proc.stderr.read()}"
            )
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
    if run_dir is None:
        raise SystemExit("vf-eval never created its run directory")
    keys_at_kill, errors_at_kill, torn = read_keys(run_dir)
    status_at_kill = json.loads((run_dir / "metadata.json").read_text())["status"]
    ok_at_kill = sum(keys_at_kill.values()) - sum(errors_at_kill.values())

    before = server.stats()["n_requests"]
    t0 = time.perf_counter()
    resumed = subprocess.run([*cmd, "--resume"], env=child_env(), capture_output=True, text=True, timeout=300)
    wall = time.perf_counter() - t0
    if resumed.returncode != 0:
        raise SystemExit(f"resume failed ({resumed.returncode}): {resumed.stderr[-2000:]}")
    resume_requests = server.stats()["n_requests"] - before
    keys, errors, bad = read_keys(run_dir)
    meta = json.loads((run_dir / "metadata.json").read_text())
    to_run = len(expected) - ok_at_kill
    return {
        "rows_at_kill": sum(keys_at_kill.values()),
        "torn_lines_at_kill": torn,
        "status_at_kill": status_at_kill,
        "to_run_on_resume": to_run,
        "resume_requests": resume_requests,
        **{f"{k}_after_resume": v for k, v in check_keys(keys, expected).items()},
        "bad_lines_after_resume": bad,
        "errors_by_type_after_resume": dict(errors.most_common()),
        "status_after_resume": meta["status"],
        "resumes": meta["resumes"],
        "resume_wall_s": round(wall, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument(
        "--timeout", type=float, default=1.0, help="per-rollout timeout (s); hangs last an hour"
    )
    parser.add_argument("--latency", type=float, default=0.02, help="server latency per request (s)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    # The server draws errors first, then hangs among the requests that did not fail.
    script = ServerScript(
        replies=[ScriptedReply(content="<think>reversing</think><answer>{reversed_last_user}</answer>")],
        latency_s=args.latency,
        error_rate=ERROR_RATE,
        error_statuses=[500, 429],
        hang_rate=HANG_SHARE / (1 - ERROR_RATE),
        hang_s=3600.0,
        seed=args.seed,
    )
    expected = {(e, i) for e in range(EXAMPLES) for i in range(PER_EXAMPLE)}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="vf-eval-faults-") as tmp, ScriptedServer.spawn(script) as server:
        work = Path(tmp)
        full = full_run(server, work, args, expected)
        print(f"full run: {json.dumps(full)}", flush=True)
        killed = kill_and_resume(server, work, args, expected)
        print(f"kill -9 + resume: {json.dumps(killed)}", flush=True)
        server_stats = server.stats()

    checks = {
        "full_run_each_rollout_once": full["unique"] == len(expected) and full["duplicates"] == 0,
        "full_run_errors_recorded_by_type": set(full["errors_by_type"])
        == {"ServerError", "RateLimitError", "RolloutTimeoutError"}
        and full["metadata_errors_match"],
        "killed_halfway": 0 < killed["rows_at_kill"] < len(expected),
        "resume_complete": killed["missing_after_resume"] == 0
        and killed["duplicates_after_resume"] == 0
        and killed["unexpected_after_resume"] == 0
        and killed["status_after_resume"] == "complete",
        "resume_sent_only_what_was_missing_or_errored": killed["resume_requests"]
        == killed["to_run_on_resume"],
    }
    summary = {
        "rollouts": len(expected),
        "unique": full["unique"],
        "errors_by_type": full["errors_by_type"],
        "error_share": full["error_share"],
        "missing_after_resume": killed["missing_after_resume"],
        "duplicates_after_resume": killed["duplicates_after_resume"],
        "errors_by_type_after_resume": killed["errors_by_type_after_resume"],
        "rows_at_kill": killed["rows_at_kill"],
        "rerun_on_resume": killed["to_run_on_resume"],
        "resume_requests": killed["resume_requests"],
        "full_run_wall_s": full["wall_s"],
        "server": server_stats,
        "checks": checks,
        "ok": all(checks.values()),
        "total_wall_s": round(time.perf_counter() - t0, 2),
    }
    print(json.dumps(summary), flush=True)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
