"""Our trainer step at two commits, in one run on one machine: is a slowdown the code's or the machine's?

    python benchmarks/step_compare.py 76eef25                  # that commit against the working tree
    python benchmarks/step_compare.py 76eef25 HEAD~40 --rounds 3 --size 25m -- --warmup 1 --steps 4

Why: `benchmarks/README.md` recorded our 0.8M-parameter step at 0.136 s (0.466x TRL's) on
2026-11-27 and a later run measured 0.199 s (0.69x) on another machine (issue 53). A figure from
another day and another machine cannot say which of the two moved; the same command at both
commits, alternated on the same machine, can.

Each ``REF`` is checked out once into a temporary ``git worktree`` (detached; removed at the end)
and its own ``benchmarks/trainer_step.py --no-trl`` runs there, with that tree first on
``PYTHONPATH``, in this interpreter's environment: every ref is measured by the benchmark and the
trainer of its own commit, on the same installed packages. ``.`` is the working tree as it is.
The refs run in turn, ``--rounds`` times (A B A B ...), so a change in the machine's load shows
as a spread across rounds rather than as a difference between refs. Arguments after ``--`` go
to every ``trainer_step.py`` (``--size``, ``--warmup``, ``--steps``, ``--threads`` ...).

Printed: a line per run (ref, round, s/step, generation and forward+backward seconds, the
machine's matmul peak measured in that run), then one JSON object as the LAST line: per ref the
median s/step, phases and peak over its rounds, every run, and each ref's s/step over the first
ref's (``vs_first``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def checkout(ref: str, into: Path) -> Path:
    """``ref`` as a detached worktree under ``into`` (``.``: the working tree itself)."""
    if ref == ".":
        return ROOT
    sha = subprocess.run(["git", "rev-parse", "--verify", f"{ref}^{{commit}}"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout.strip()
    tree = into / sha[:12]
    if not tree.exists():
        subprocess.run(["git", "worktree", "add", "--detach", "--quiet", str(tree), sha], cwd=ROOT, check=True)
    return tree


def measure(tree: Path, passthrough: list[str], timeout: float) -> dict[str, Any]:
    """One ``trainer_step.py --no-trl`` of the commit checked out at ``tree``: its JSON line.

    The tree and its own environments come first on ``PYTHONPATH``: the installed (editable)
    environment packages are this checkout's, and a reward of another commit is another workload.
    """
    own = [str(tree), *sorted(str(d) for d in (tree / "environments").glob("*") if (d / "pyproject.toml").is_file())]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([*own, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    done = subprocess.run([sys.executable, "benchmarks/trainer_step.py", "--no-trl", *passthrough], cwd=tree,
                          env=env, capture_output=True, text=True, timeout=timeout)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"trainer_step.py at {tree} failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return json.loads(lines[-1])


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    def med(key: str) -> float | None:
        vals = [r[key] for r in runs if r.get(key) is not None]
        return round(statistics.median(vals), 4) if vals else None

    return {"s_per_step": med("s_per_step"), "generation_s": med("generation_s"), "fwd_bwd_s": med("fwd_bwd_s"),
            "peak_gflops": med("peak_gflops"), "learner_mfu": med("learner_mfu")}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    passthrough: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, passthrough = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("refs", nargs="+", help="commits to compare ('.' = the working tree); one ref: it against '.'")
    ap.add_argument("--rounds", type=int, default=2, help="runs per ref, alternated (default 2)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds one run may take")
    a = ap.parse_args(argv)
    if a.rounds < 1:
        ap.error("--rounds must be at least 1")
    refs = a.refs if len(a.refs) > 1 else [*a.refs, "."]
    runs: dict[str, list[dict[str, Any]]] = {ref: [] for ref in refs}
    with tempfile.TemporaryDirectory(prefix="vf-step-compare-") as tmp:
        trees = {ref: checkout(ref, Path(tmp)) for ref in refs}
        try:
            for rnd in range(a.rounds):
                for ref in refs:
                    out = measure(trees[ref], passthrough, a.timeout)
                    phases = out.get("ours_phases_s") or {}
                    run = {"round": rnd, "s_per_step": _r(out.get("ours_s_per_step")),
                           "generation_s": _r(phases.get("generation")), "fwd_bwd_s": _r(phases.get("fwd_bwd")),
                           "peak_gflops": round((out.get("peak_tflops") or 0) * 1e3, 1) or None,
                           "learner_mfu": out.get("learner_mfu")}
                    runs[ref].append(run)
                    print(f"{ref:<12} round {rnd}: {run['s_per_step']} s/step (generation {run['generation_s']} s, "
                          f"forward+backward {run['fwd_bwd_s']} s; peak {run['peak_gflops']} GFLOP/s)", flush=True)
        finally:
            for tree in trees.values():
                if tree != ROOT:
                    subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)
    per_ref = {ref: summary(rs) for ref, rs in runs.items()}
    first = per_ref[refs[0]]["s_per_step"]
    for s in per_ref.values():
        s["vs_first"] = round(s["s_per_step"] / first, 3) if first and s["s_per_step"] else None
    print(json.dumps({"refs": per_ref, "runs": runs, "args": passthrough, "rounds": a.rounds,
                      "load_after": [round(x, 2) for x in os.getloadavg()]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
