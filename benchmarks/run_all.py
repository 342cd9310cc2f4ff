"""Every headline benchmark, one after another, and one table of where we stand.

    python benchmarks/run_all.py --quick                  # quick settings, ~20-25 minutes on 2 cores
    python benchmarks/run_all.py                          # each benchmark's own defaults (an hour or more)
    python benchmarks/run_all.py --quick --only trainer_step,gateway_overhead
    python benchmarks/run_all.py --quick --no-readme      # print the table, leave benchmarks/README.md alone
    python benchmarks/run_all.py --learning [--only quickstart_f32,real_agent_seed1] [--fresh]

Each benchmark runs as its own process (never two at once: the reference machine has 2 cores)
and prints one JSON object as its last stdout line; that line is parsed into rows of the
table: the figure, ours, the peer's (or the baseline's), ours / peer, the target, whether it
was met, the date, and the machine's load average (1 minute) before and after the benchmark
ran, so a reader sees which figures were taken on a busy machine. ``--quick`` uses short
settings (listed in the table's ``settings`` column); a figure measured that way is a
smoke figure, noisier than the benchmark's own defaults give. The Quickstart's learning run
is whole even then (under a minute); the agentic one stops after 150 of its 500 RL steps, so
its target is marked "(shortened run)"; the example configs' runs (``examples_learn``) are whole
but on one seed instead of three.

``--learning`` reruns every learning figure the README and docs quote instead (the Quickstart on
ten seeds in both precisions and at one thread, every example config on its seeds, RL through an
agent program on seeds 0-5, the vLLM path against the embedded one, the real model's arithmetic
and tool use on seeds 0-2, its tool use through an agent program on seeds 0-5; about twelve hours
on 2 cores, see ``_learning_claims.py``). Each unit's
result is kept under ``--results`` (default ``benchmarks/learning``, in the repository: every session
starts from a fresh clone, and a result kept only on the machine that ran it was lost with it; the
units' logs there are not tracked) and reused by the next run, so the
whole set can be finished over several sittings (``--fresh`` reruns all); the table (claim,
config, seed, target, figure, met) is written to ``benchmarks/LEARNING.md`` and the JSON to
``--results``/learning.json, and is the last stdout line. The table always lists every unit: with
``--only``, the others show their kept results or a row saying they have not run yet.

The table is rewritten in ``benchmarks/README.md`` between the ``<!-- run_all:begin -->`` and
``<!-- run_all:end -->`` markers; with ``--only``, rows of the benchmarks not run are kept as
they were. Each benchmark's full output goes to ``--log-dir`` (default: a temporary
directory, named at the end). The LAST stdout line is one JSON object with every row.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
README = HERE / "README.md"
LEARNING = HERE / "LEARNING.md"
RECORDS = HERE / "learning"  # each learning unit's kept result (tracked, so a fresh clone keeps them)
BEGIN, END = "<!-- run_all:begin -->", "<!-- run_all:end -->"
SHORTENED = {"agentic_learning"}  # runs that --quick cuts short (fewer RL steps than the recipe)
COLUMNS = ("benchmark", "figure", "ours", "peer", "ratio", "target", "met", "date", "load", "settings")


@dataclass
class Row:
    """One headline figure: ours against a peer (or a baseline) and the target it has."""

    benchmark: str
    figure: str
    ours: str
    peer: str = "—"
    ratio: str = "—"
    target: str = "—"
    met: str = "—"
    date: str = ""
    load: str = ""
    settings: str = ""


def _num(x: Any, digits: int = 3) -> str:
    if x is None:
        return "—"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int | float):
        return f"{x:,.{digits}f}" if abs(x) < 1000 else f"{x:,.0f}"
    return str(x)


def _met(ok: bool | None) -> str:
    return "—" if ok is None else ("yes" if ok else "**no**")


def _ratio(a: Any, b: Any) -> float | None:
    return a / b if isinstance(a, int | float) and isinstance(b, int | float) and b else None


# -- each benchmark's rows ------------------------------------------------------------------


def rows_serve_throughput(out: dict[str, Any]) -> list[Row]:
    s, g, q = out.get("server_tok_s"), out.get("generate_tok_s"), out.get("sequential_tok_s")
    rg, rq = out.get("ratio_vs_generate"), out.get("ratio_vs_sequential")
    return [
        Row("serve_throughput", "vf-serve tok/s vs one batched model.generate", _num(s, 0), _num(g, 0), _num(rg),
            "≥ 0.8", _met(None if rg is None else rg >= 0.8)),
        Row("serve_throughput", "vf-serve tok/s vs requests one at a time", _num(s, 0), _num(q, 0), _num(rq, 1),
            "≥ 10", _met(None if rq is None else rq >= 10)),
    ]


def rows_serve_vs_vllm(out: dict[str, Any]) -> list[Row]:
    rows = []
    streaming = out.get("mode") == "streaming"
    for size, r in (out.get("sizes") or {}).items():
        if streaming or "ours_tok_s" in r:
            ratio = r.get("ratio")
            rows.append(Row("serve_vs_vllm", f"{size}: streaming output tok/s vs vLLM (vllm bench serve)",
                            _num(r.get("ours_tok_s"), 0), _num(r.get("vllm_tok_s"), 0), _num(ratio), "≥ 1.0",
                            _met(None if ratio is None else ratio >= 1.0)))
            ot, vt = r.get("ours_tpot_ms"), r.get("vllm_tpot_ms")
            rows.append(Row("serve_vs_vllm", f"{size}: streaming time per output token, ms", _num(ot, 2), _num(vt, 2),
                            _num(_ratio(ot, vt)), "≤ 1.0", _met(None if ot is None or vt is None else ot <= vt)))
        else:
            ratio = r.get("ratio")
            rows.append(Row("serve_vs_vllm", f"{size}: tok/s vs vLLM, 64 concurrent requests",
                            _num(r.get("vf_serve_tok_s"), 0), _num(r.get("vllm_tok_s"), 0), _num(ratio), "≥ 1.0",
                            _met(None if ratio is None else ratio >= 1.0)))
    return rows


def rows_rollout_engine(out: dict[str, Any]) -> list[Row]:
    rps, base = out.get("plain_single_turn_rps_c64"), out.get("plainsdk_single_turn_rps_c64")
    eff, base_eff = out.get("plain_efficiency_500ms_c256"), out.get("plainsdk_efficiency_500ms_c256")
    peer = " (peer: the SDK's own transport)"
    rows = [
        Row("rollout_engine", "plain AsyncOpenAI client, single-turn rollouts/s, C=64" + peer, _num(rps, 0),
            _num(base, 0), _num(_ratio(rps, base)), "≥ 1,000", _met(None if rps is None else rps >= 1000)),
        Row("rollout_engine", "plain AsyncOpenAI client, latency efficiency, 500 ms, C=256" + peer, _num(eff),
            _num(base_eff), _num(_ratio(eff, base_eff)), "≥ 0.75", _met(None if eff is None else eff >= 0.75)),
    ]
    if out.get("single_turn_rps_c64") is not None:  # a run with the peer (verifiers 0.1.5)
        ours, peer_rps = out.get("single_turn_rps_c64"), out.get("peer_single_turn_rps_c64")
        ratio = _ratio(ours, peer_rps)
        rows.append(Row("rollout_engine", "single-turn rollouts/s, C=64, vs verifiers 0.1.5", _num(ours, 0),
                        _num(peer_rps, 0), _num(ratio), "—", "—"))
    return rows


def rows_trainer_step(out: dict[str, Any]) -> list[Row]:
    m = out.get("model") or {}
    size = f"{(m.get('params') or 0) / 1e6:.1f}M params"
    ratio, target = out.get("ratio"), out.get("target_ratio", 0.5)
    ph = out.get("ours_phases_s") or {}
    per_round = [r.get("ratio") for r in out.get("rounds") or []]
    spread = f"; ratio per round {' / '.join(_num(r) for r in per_round)}" if len(per_round) > 1 else ""
    return [
        Row("trainer_step", f"s per GRPO step vs TRL GRPOTrainer ({size}, synchronous{spread})",
            _num(out.get("ours_s_per_step")),
            _num(out.get("trl_s_per_step")), _num(ratio), f"≤ {target}", _met(None if ratio is None else ratio <= target)),
        Row("trainer_step", f"learner MFU ({size}; generation {_num(ph.get('generation'))} s, forward+backward "
            f"{_num(ph.get('fwd_bwd'))} s, optimizer {_num(ph.get('optimizer'))} s)", _num(out.get("learner_mfu")),
            f"peak {_num((out.get('peak_tflops') or 0) * 1e3, 1)} GFLOP/s", "—", "reported", "—"),
    ]


def rows_gateway_overhead(out: dict[str, Any]) -> list[Row]:
    ratio = out.get("ratio")
    return [Row("gateway_overhead", f"agent-program rollouts/s through the gateway vs direct, C={out.get('concurrency')}",
                _num(out.get("gateway_rps"), 1), _num(out.get("direct_rps"), 1), _num(ratio), "≥ 0.9",
                _met(None if ratio is None else ratio >= 0.9))]


def _learning_rows(name: str, what: str, out: dict[str, Any], quick: bool) -> list[Row]:
    first, last, wall = out.get("reward_first"), out.get("reward_last"), out.get("wall_s")
    met = _met(out.get("targets_met")) + (" (shortened run)" if quick and name in SHORTENED else "")
    return [Row(name, f"{what}: reward first → last, wall s", f"{_num(first, 2)} → {_num(last, 2)} in {_num(wall, 0)} s",
                "—", "—", "≤ 0.2 → ≥ 0.8 in ≤ 600 s", met)]


def rows_learning(out: dict[str, Any], quick: bool = False) -> list[Row]:
    return _learning_rows("learning", "quickstart GRPO, letter-repeat", out, quick)


def rows_agentic_learning(out: dict[str, Any], quick: bool = False) -> list[Row]:
    rows = _learning_rows("agentic_learning", "SFT warm-up + MIX, key-lookup tool use", out, quick)
    if "mean_turns_last" in out:
        rows[0].ours += f", {_num(out['mean_turns_last'], 2)} turns"
        rows[0].target += ", ≥ 2 turns"
    return rows


def rows_examples_learn(out: dict[str, Any], quick: bool = False) -> list[Row]:
    """One row per example config: each seed's reward first 10 steps -> last 10%, against the config's target."""
    del quick  # --quick runs fewer seeds, which the settings column says
    by_config: dict[str, list[dict[str, Any]]] = {}
    for run in out.get("runs") or []:
        by_config.setdefault(run["config"], []).append(run)
    rows = []
    for config, runs in by_config.items():
        seeds = ", ".join(str(r["seed"]) for r in runs)
        curves = " / ".join(f"{_num(r.get('first'), 2)} → {_num(r.get('last'), 2)}" for r in runs)
        met = sum(bool(r.get("met")) for r in runs)
        slowest = max((r.get("seconds") or 0) for r in runs)
        rows.append(Row("examples_learn", f"examples/configs/{config}.toml, seed {seeds}: reward first 10 steps → "
                        f"last 10% (slowest run {slowest:.0f} s)", curves, "—", "—", runs[0].get("target", "—"),
                        f"{_met(met == len(runs))} ({met}/{len(runs)})"))
    return rows


@dataclass
class Bench:
    """A benchmark: its script, its arguments quick and full, and how its JSON becomes rows."""

    name: str
    quick_args: list[str]
    full_args: list[str]
    rows: Callable[..., list[Row]]
    timeout_s: float
    learning: bool = False
    optional_flags: list[str] = field(default_factory=list)  # added where the script's --help lists them
    path: Path | None = None  # the script, when it is not benchmarks/<name>.py

    @property
    def script(self) -> Path:
        return self.path or HERE / f"{self.name}.py"


BENCHES = [
    Bench("serve_throughput", ["--sequential-requests", "4"], [], rows_serve_throughput, 300),
    Bench("serve_vs_vllm", ["--sizes", "tiny,25m", "--rounds", "2"], [], rows_serve_vs_vllm, 900,
          optional_flags=["--streaming"]),
    Bench("rollout_engine", ["--plain-only", "--quick"], ["--plain-only"], rows_rollout_engine, 600),
    Bench("trainer_step", ["--rounds", "3", "--warmup", "1", "--steps", "4"], ["--rounds", "3"], rows_trainer_step, 900),
    Bench("trainer_step_25m", ["--size", "25m", "--rounds", "2", "--warmup", "1", "--steps", "3"],
          ["--size", "25m", "--rounds", "3", "--warmup", "1", "--steps", "4"], rows_trainer_step, 1200,
          path=HERE / "trainer_step.py"),
    Bench("trainer_step_104m", ["--size", "104m", "--warmup", "1", "--steps", "2"],
          ["--size", "104m", "--rounds", "2", "--warmup", "1", "--steps", "3"], rows_trainer_step, 1800,
          path=HERE / "trainer_step.py"),
    Bench("gateway_overhead", ["--rollouts", "64", "--loader-rollouts", "192", "--rounds", "1"], [],
          rows_gateway_overhead, 300),
    Bench("learning", [], [], rows_learning, 900, learning=True),  # the whole Quickstart: under a minute
    Bench("agentic_learning", ["--max_steps", "150"], [], rows_agentic_learning, 900, learning=True),
    # every example config without an external server, its whole budget: 1 seed quick (~4 min), 10 in full (~20 min)
    Bench("examples_learn", ["--seeds", "1"], [], rows_examples_learn, 5400, learning=True),
]


# -- running ----------------------------------------------------------------------------------


def last_json(stdout: str) -> dict[str, Any]:
    """The benchmark's last non-empty stdout line, which must be one JSON object."""
    lines = [ln for ln in stdout.splitlines() if ln.strip()]
    if not lines:
        raise ValueError("printed nothing on stdout")
    try:
        out = json.loads(lines[-1])
    except json.JSONDecodeError as exc:
        raise ValueError(f"last stdout line is not JSON: {lines[-1][:200]!r}") from exc
    if not isinstance(out, dict):
        raise ValueError(f"last stdout line is JSON but not an object: {lines[-1][:200]!r}")
    return out


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def supported(script: Path, flags: list[str]) -> list[str]:
    """The flags of ``flags`` that ``script --help`` lists (an option another change may not have landed)."""
    if not flags:
        return []
    done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, env=_env(),
                          cwd=str(ROOT), timeout=120)
    return [f for f in flags if f in done.stdout]


def _load() -> float:
    return os.getloadavg()[0]


def run_bench(bench: Bench, quick: bool, log_dir: Path) -> tuple[list[Row], dict[str, Any]]:
    """Run one benchmark; its rows (one saying why, if it failed) and its JSON (empty if none)."""
    args = (bench.quick_args if quick else bench.full_args) + supported(bench.script, bench.optional_flags)
    cmd = [sys.executable, str(bench.script), *args]
    settings = " ".join(args) if args else "defaults"
    log = log_dir / f"{bench.name}.log"
    load0, t0 = _load(), time.perf_counter()
    date = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
    print(f"[run_all] {bench.name}: {' '.join(cmd[1:])} (load {load0:.2f})", flush=True)
    try:
        with open(log, "w") as err:
            done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=_env(), cwd=str(ROOT),
                                  timeout=bench.timeout_s)
        with open(log, "a") as f:
            f.write("\n--- stdout ---\n" + done.stdout)
        out = last_json(done.stdout)
        rows = bench.rows(out, quick) if bench.learning else bench.rows(out)
        if done.returncode != 0:
            settings += f" (exit {done.returncode})"
    except (subprocess.TimeoutExpired, ValueError) as exc:
        why = f"timed out after {bench.timeout_s:.0f} s" if isinstance(exc, subprocess.TimeoutExpired) else str(exc)
        rows, out = [Row(bench.name, f"FAILED: {why} (log {log})", "—")], {}
    load1 = _load()
    for r in rows:  # the bench's name, not the script's: one script may run as several benches (sizes)
        r.benchmark, r.date, r.load, r.settings = bench.name, date, f"{load0:.1f} → {load1:.1f}", settings
    print(f"[run_all] {bench.name}: {time.perf_counter() - t0:.0f} s, load {load0:.2f} → {load1:.2f}", flush=True)
    return rows, out


# -- the table --------------------------------------------------------------------------------


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table(rows: list[Row]) -> str:
    """The rows as one markdown table."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    lines += ["| " + " | ".join(_cell(str(getattr(r, c))) for c in COLUMNS) + " |" for r in rows]
    return "\n".join(lines)


def parse_table(block: str) -> list[Row]:
    """The rows of a table written by `table` (to keep those of benchmarks not rerun)."""
    rows = []
    for line in block.splitlines():
        cells = [c.strip().replace("\\|", "|") for c in line.strip().strip("|").split(" | ")]
        if len(cells) != len(COLUMNS) or cells[0] in ("benchmark", "---") or set(cells[0]) <= {"-", " "}:
            continue
        rows.append(Row(**dict(zip(COLUMNS, cells, strict=True))))
    return rows


def update_readme(text: str, rows: list[Row], ran: set[str]) -> str:
    """``text`` with the table between the markers replaced; rows of benchmarks not in ``ran`` kept.

    Without markers the section is added after the file's first paragraph.
    """
    block = ""
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        block, tail = rest.split(END, 1)
    else:
        cut = text.find("\n\n", text.find("\n\n") + 2)
        cut = len(text) if cut < 0 else cut + 2
        head = text[:cut] + ("## Headline figures (`python benchmarks/run_all.py --quick`)\n\n"
                             "Regenerated by `benchmarks/run_all.py`; `load` is the 1-minute load average before → "
                             "after each benchmark (2 cores: above 2 the machine was busy).\n\n")
        tail = "\n\n" + text[cut:]
    order = [b.name for b in BENCHES]
    kept = [r for r in parse_table(block) if r.benchmark not in ran]
    merged = sorted(kept + rows, key=lambda r: order.index(r.benchmark) if r.benchmark in order else len(order))
    return f"{head}{BEGIN}\n{table(merged)}\n{END}{tail}"


MOVED = 0.10  # a ratio that moved by more than this share of its recorded value is printed


def _figure_key(row: Row) -> tuple[str, str]:
    """A row's identity across runs: its figure without the measured details after a ';' in parentheses."""
    return row.benchmark, re.sub(r";[^)]*\)", ")", row.figure)


def _ratio_value(cell: str) -> float | None:
    try:
        return float(cell.replace(",", ""))
    except ValueError:
        return None


def compare_with_recorded(recorded: list[Row], rows: list[Row]) -> tuple[list[str], list[str]]:
    """``(moved, flipped)``: rows whose same-run ratio (ours / its own baseline, never an absolute time)
    moved by more than `MOVED` against the recorded table, and rows whose target went from met to missed.

    Issue 53: the toy trainer step fell from 0.47x to 0.70x TRL's and no table said so.
    """
    before = {_figure_key(r): r for r in recorded}
    moved, flipped = [], []
    for row in rows:
        old = before.get(_figure_key(row))
        if old is None:
            continue
        a, b = _ratio_value(old.ratio), _ratio_value(row.ratio)
        if a and b is not None and abs(b / a - 1) > MOVED:
            moved.append(f"{row.benchmark}: {row.figure}: ratio {old.ratio} ({old.date}) -> {row.ratio} "
                         f"({b / a - 1:+.0%})")
        if old.met.startswith("yes") and row.met.startswith("**no**"):
            flipped.append(f"{row.benchmark}: {row.figure}: target {row.target} met on {old.date}, missed now "
                           f"(ours {row.ours}, ratio {row.ratio})")
    return moved, flipped


def learning(only: list[str], results: Path, fresh: bool, write: bool) -> int:
    """``--learning``: every learning claim's units, their table in LEARNING.md, the JSON last."""
    sys.path.insert(0, str(HERE))
    from _learning_claims import run_learning
    from _learning_claims import table as claims_table

    rows, summary = run_learning(results, only, fresh)
    text = claims_table(rows)
    print(text)
    (results / "learning.md").write_text(text + "\n")
    (results / "learning.json").write_text(json.dumps(summary, indent=1))
    if write:
        LEARNING.write_text(f"# Learning claims\n\nWritten by `python benchmarks/run_all.py --learning` "
                            f"({summary['met']} rows met, {len(summary['not_run_yet'])} units not run yet; units reused from "
                            f"earlier sittings keep their dates).\n\n"
                            f"{text}\n")
        print(f"[run_all] learning table written to {LEARNING.relative_to(ROOT)}")
    print(json.dumps(summary))
    return 0 if summary["not_met"] == 0 and summary["unknown"] == 0 else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="short settings (~20-25 minutes on 2 cores)")
    ap.add_argument("--only", default="", help="comma-separated benchmark names (default: all)")
    ap.add_argument("--no-readme", action="store_true", help="do not rewrite the table in benchmarks/README.md")
    ap.add_argument("--log-dir", type=Path, default=None, help="where each benchmark's output goes")
    ap.add_argument("--learning", action="store_true", help="rerun every learning claim instead (hours; resumable)")
    ap.add_argument("--results", type=Path, default=RECORDS,
                    help="--learning: where each unit's result is kept and reused")
    ap.add_argument("--fresh", action="store_true", help="--learning: rerun units that have a kept result")
    args = ap.parse_args(argv)
    names = [n for n in args.only.split(",") if n]
    if args.learning:
        return learning(names, args.results, args.fresh, not args.no_readme)
    unknown = sorted(set(names) - {b.name for b in BENCHES})
    if unknown:
        ap.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(b.name for b in BENCHES)}")
    chosen = [b for b in BENCHES if not names or b.name in names]
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="vf-run-all-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    rows: list[Row] = []
    results: dict[str, Any] = {}
    for bench in chosen:
        got, results[bench.name] = run_bench(bench, args.quick, log_dir)
        rows += got
    print(table(rows))
    text = README.read_text()
    recorded = parse_table(text.split(BEGIN, 1)[1].split(END, 1)[0]) if BEGIN in text and END in text else []
    moved, flipped = compare_with_recorded(recorded, rows)
    for line in moved:
        print(f"[run_all] moved: {line}")
    for line in flipped:
        print(f"[run_all] TARGET NOW MISSED: {line}")
    if not args.no_readme:
        README.write_text(update_readme(README.read_text(), rows, {b.name for b in chosen}))
        print(f"[run_all] table written to {README.relative_to(ROOT)}")
    print(f"[run_all] {time.perf_counter() - t0:.0f} s in all; logs in {log_dir}")
    failed = [r.benchmark for r in rows if r.figure.startswith("FAILED")]
    print(json.dumps({"rows": [asdict(r) for r in rows], "failed": failed, "moved": moved, "flipped": flipped,
                      "quick": args.quick, "elapsed_s": round(time.perf_counter() - t0, 1), "log_dir": str(log_dir)}))
    return 1 if failed or flipped else 0


if __name__ == "__main__":
    sys.exit(main())
