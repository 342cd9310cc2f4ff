#!/usr/bin/env bash
# The GPU benchmarks of issue 39 in one command, for a bare, offline GPU machine:
#
#   bash scripts/gpu-bench.sh            # 250m: fast_decode (engine vs generate), trainer_step (ours vs TRL)
#   bash scripts/gpu-bench.sh --1b       # then the same at 1b (0.97B: hidden 2048, 22 layers)
#   bash scripts/gpu-bench.sh --only-1b  # 1b alone (about as long as the 250m pair: fits a second call)
#   bash scripts/gpu-bench.sh --no-install   # a warm machine that ran it once already
#
# Nothing is downloaded: the wheels in .whl/ (TRL, datasets and whatever else the interpreter lacks)
# and this checkout (with environments/letter_repeat) are installed with `pip --target` into
# $SITE (default /tmp/site), which goes on PYTHONPATH, so TRL runs in the benchmark's own
# interpreter (trainer_step.py keeps PYTHONPATH for it). Each part runs under `timeout`; its output
# goes to $OUT/NAME.log and its last JSON line to $OUT/NAME.json ($OUT: default /tmp/gpu-bench).
# A part that fails or times out is reported and the next one runs. Timeouts (seconds) can be set
# with FD_TIMEOUT / TS_TIMEOUT; PYTHON picks the interpreter (default python3).
set -u

PY=${PYTHON:-python3}
SITE=${SITE:-/tmp/site}
OUT=${OUT:-/tmp/gpu-bench}
SIZES="250m"
INSTALL=1
for arg in "$@"; do
    case "$arg" in
        --1b) SIZES="250m 1b" ;;
        --only-1b) SIZES="1b" ;;
        --no-install) INSTALL=0 ;;
        *) echo "usage: $0 [--1b | --only-1b] [--no-install]" >&2; exit 2 ;;
    esac
done
cd "$(dirname "$0")/.." || exit 2
mkdir -p "$OUT" "$SITE"
# The checkout before $SITE: its copy of verifiers/trainers in $SITE is only for metadata, and with
# --no-install after an edit a stale copy there must not shadow the source.
export PYTHONPATH="$PWD:$SITE:$PWD/environments/letter_repeat${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
start=$SECONDS

if [ "$INSTALL" = 1 ]; then
    if compgen -G ".whl/*.whl" > /dev/null; then
        echo "installing $(ls .whl/*.whl | wc -l) wheels from .whl/ into $SITE"
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl \
            || echo "WARNING: installing .whl/*.whl failed (what is missing shows below)"
    else
        echo "no wheels in .whl/: using what $PY has"
    fi
    "$PY" -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --no-cache-dir --upgrade \
        --target "$SITE" . environments/letter_repeat \
        || echo "WARNING: installing the checkout failed; PYTHONPATH has it anyway"
    echo "installed in $((SECONDS - start)) s"
fi

nvidia-smi -L || echo "WARNING: nvidia-smi failed"
"$PY" - <<'EOF'
import importlib
import sys

print("python", sys.version.split()[0], sys.executable)
for name in ("torch", "transformers", "accelerate", "peft", "trl", "datasets", "verifiers", "letter_repeat"):
    try:
        mod = importlib.import_module(name)
    except Exception as exc:  # report every missing piece, not just the first
        print(f"{name}: NOT importable ({type(exc).__name__}: {exc})")
    else:
        print(f"{name} {getattr(mod, '__version__', '')} ({getattr(mod, '__file__', '')})")
try:
    import torch

    print("cuda:", torch.cuda.is_available(), torch.version.cuda,
          torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
except Exception as exc:
    print("torch: NOT importable", exc)
EOF

summary=""
part() {  # NAME SECONDS SCRIPT ARGS...: one benchmark under timeout, logged, its last JSON line kept
    local name=$1 secs=$2 t0=$SECONDS rc
    shift 2
    echo "=== $name (timeout ${secs} s): $PY $*"
    timeout -k 20 "$secs" "$PY" "$@" 2>&1 | tee "$OUT/$name.log"
    rc=${PIPESTATUS[0]}
    grep '^{' "$OUT/$name.log" | tail -n 1 > "$OUT/$name.json"
    [ -s "$OUT/$name.json" ] || rm -f "$OUT/$name.json"
    local note=""
    [ "$rc" = 124 ] && note=" (TIMED OUT)"
    echo "=== $name: exit $rc after $((SECONDS - t0)) s$note"
    summary+="$name: exit $rc, $((SECONDS - t0)) s$note"$'\n'
}

for size in $SIZES; do
    if [ "$size" = 1b ]; then steps=3; rounds=5; fd=${FD_TIMEOUT:-240}; ts=${TS_TIMEOUT:-420}
    else steps=4; rounds=8; fd=${FD_TIMEOUT:-180}; ts=${TS_TIMEOUT:-330}; fi
    part "fast_decode_$size" "$fd" benchmarks/fast_decode.py --device cuda --sizes "$size" --autocast --rounds "$rounds"
    part "trainer_step_$size" "$ts" benchmarks/trainer_step.py --device cuda --mixed-precision bf16 --size "$size" \
        --warmup 2 --steps "$steps"
done

echo "=== summary ($((SECONDS - start)) s in all)"
printf '%s' "$summary"
"$PY" - "$OUT" <<'EOF'
import json
import sys
from pathlib import Path

keys = {"fast_decode": ("engine_s", "hf_s", "hf_over_engine", "engine_step_ms", "hf_step_ms", "decode_path",
                        "greedy_rows_equal"),
        "trainer_step": ("ours_s_per_step", "trl_s_per_step", "ratio", "learner_mfu", "fwd_bwd_mfu", "peak_tflops",
                         "ours_generation_s", "trl_generation_s", "ours_peak_gpu_memory_gb",
                         "trl_peak_gpu_memory_gb", "trl_version", "trl_error")}
for path in sorted(Path(sys.argv[1]).glob("*.json")):
    d = json.loads(path.read_text())
    if "sizes" in d:
        for size, r in d["sizes"].items():
            print(path.stem, size, {k: r.get(k) for k in keys["fast_decode"]})
    else:
        print(path.stem, {k: d.get(k) for k in keys["trainer_step"]}, "phases", d.get("ours_phases_s"))
EOF
