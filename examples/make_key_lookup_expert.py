"""Write the expert episodes that examples/configs/agentic.toml mixes into GRPO (the MIX algorithm).

Each line is one correct two-turn key-lookup episode (call ``lookup`` with the asked key, then
answer with the value it returned) as a chat row with the environment's tool schemas, drawn
from tables of a different seed than the training split. Rerun it after changing the
environment's prompt or tool, so the expert rows keep rendering to the tokens the model sees:

    python examples/make_key_lookup_expert.py [--num 1024] [--seed 1] [--digits 2] [--out ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num", type=int, default=1024, help="episodes to write")
    ap.add_argument("--seed", type=int, default=1, help="table seed (the training split uses 0)")
    ap.add_argument("--digits", type=int, default=2, help="digits per value (agentic.toml's env_args)")
    ap.add_argument("--out", default=str(ROOT / "examples" / "data" / "key_lookup_expert.jsonl"))
    a = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT / "environments" / "key_lookup"))  # works from a clone, installed or not
    import key_lookup

    env = key_lookup.load_environment(num_train_examples=a.num, num_eval_examples=0, seed=a.seed,
                                         digits=a.digits)
    rows = env.get_dataset().rows
    lines = [json.dumps(key_lookup.expert_episode(r, env.oai_tools or [])) for r in rows]
    Path(a.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {len(lines)} expert episodes to {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
