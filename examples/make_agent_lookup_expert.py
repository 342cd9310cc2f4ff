"""Record the expert episodes of examples/configs/agent_program.toml by running the agent program.

A scripted server plays the expert (`agent_lookup.expert_script`: call ``lookup`` with the asked
key, then answer with the tool's reply); ``vf-eval agent-lookup -s`` runs the shipped program
against it through the gateway, once per example, and saves the run; the correct episodes are
then written as ``expert_data`` rows (``messages`` + the program's ``tools``). The episodes are
the program's own messages, so they render to the tokens a successful training rollout samples.
The tables come from another seed than the training split's.

    python examples/make_agent_lookup_expert.py [--num 512] [--seed 1] [--digits 2] [--out ...]

``--chatty 0.75`` makes them a weaker expert's instead (`agent_lookup.chatty_rows`: three answers in
four inside a sentence the grader refuses), the warm-up data of examples/configs/agent_program_rl.toml:

    python examples/make_agent_lookup_expert.py --chatty 0.75 --out examples/data/agent_lookup_chatty.jsonl

About 1 s of CPU per episode (each starts the program, which imports openai).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENV_ROOT = ROOT / "environments" / "agent_lookup"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num", type=int, default=512, help="episodes to record")
    ap.add_argument("--seed", type=int, default=1, help="table seed (the training split uses 0)")
    ap.add_argument("--digits", type=int, default=2, help="digits per value (agent_program.toml's env_args)")
    ap.add_argument("--concurrency", type=int, default=4, help="programs running at once")
    ap.add_argument("--chatty", type=float, default=0.0,
                    help="share of answers a chatty expert wraps in a sentence (agent_program_rl.toml: 0.75)")
    ap.add_argument("--out", default=str(ROOT / "examples" / "data" / "agent_lookup_expert.jsonl"))
    a = ap.parse_args(argv)
    sys.path.insert(0, str(ENV_ROOT))  # works from a clone, installed or not
    from agent_lookup import chatty_rows, expert_rows, expert_script

    from verifiers.eval.export import find_runs, load_run
    from verifiers.testing import ScriptedServer

    env_args = {"digits": a.digits, "seed": a.seed, "num_train_examples": 1, "num_eval_examples": a.num}
    with tempfile.TemporaryDirectory() as tmp, ScriptedServer(expert_script()) as srv:
        subprocess.run(
            [sys.executable, "-m", "verifiers.cli.eval", "agent-lookup", "-m", "expert", "-b", srv.base_url,
             "-k", "VF_EXPERT_KEY", "-n", str(a.num), "-r", "1", "-c", str(a.concurrency),
             "-a", json.dumps(env_args), "-s", "-o", tmp],
            check=True, cwd=ROOT,
            env={**os.environ, "VF_EXPERT_KEY": "scripted",
                 "PYTHONPATH": os.pathsep.join([str(ROOT), str(ENV_ROOT), os.environ.get("PYTHONPATH", "")])},
        )
        (run,) = find_runs(Path(tmp))
        # in example order, not the order the episodes finished in: the file is the same on every run
        results = sorted(load_run(run).results, key=lambda r: (r.example_id, r.rollout_index))
    rows = expert_rows(results)
    if len(rows) < len(results):
        print(f"note: {len(results) - len(rows)} of {len(results)} episodes were not correct and are left out")
    if a.chatty:
        rows = chatty_rows(rows, a.chatty, seed=0)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"wrote {len(rows)} expert episodes to {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
