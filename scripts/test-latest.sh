#!/usr/bin/env bash
# Today's releases, before they reach a user: install the project with only torch pinned (so pip
# resolves the newest version of everything else, as a fresh user's install does that day) and
# run the fast tests. Run before each submission: a new transformers, openai or aiohttp release
# that breaks us shows up here first, not in a user's first run. constraints.txt is untouched
# (scripts/update-constraints.sh refreshes it, with the full suite).
#
# Usage (repository root): bash scripts/test-latest.sh [extra pytest args]
#   VENV=/tmp/vf-latest bash scripts/test-latest.sh   # keep (and reuse) the virtualenv
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
PIN="$(mktemp)"
SCRATCH=""  # a virtualenv this run made itself: removed on exit (2-3 GB a run otherwise left in /tmp)
if [[ -z "${VENV:-}" ]]; then
    SCRATCH="$(mktemp -d)"
    VENV="$SCRATCH/venv"
fi
trap 'rm -f "$PIN"; [[ -z "$SCRATCH" ]] || rm -rf "$SCRATCH"' EXIT
echo "torch==2.13.0" >"$PIN"
[[ -x "$VENV/bin/python" ]] || "$PY" -m venv "$VENV"
# shellcheck disable=SC1091
. "$VENV/bin/activate"
python -m pip install -q --upgrade pip
python -m pip install -q --upgrade -c "$PIN" -e ".[dev,train,ray,mcp,gguf,reasoning-gym]" -e environments/letter_repeat
python - <<'PY'
import importlib.metadata as m
names = ["transformers", "tokenizers", "accelerate", "peft", "openai", "anthropic", "aiohttp", "pydantic",
         "datasets", "ray", "mcp", "gguf", "kernels", "reasoning-gym"]
got = []
for n in names:
    try:
        got.append(f"{n} {m.version(n)}")
    except m.PackageNotFoundError:
        pass
print("today's releases: " + ", ".join(got))
PY
# The fast tests: everything not marked slow or gpu (vLLM's CPU build is left out; tests/vllm skip).
python -m pytest -q -m "not slow and not gpu" --timeout=300 -x "$@"
