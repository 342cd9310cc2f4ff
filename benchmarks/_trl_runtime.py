"""Where `trainer_step.py` runs TRL's side, and running it: the interpreter that imports TRL (the
order is in trainer_step's docstring), its environment, and the TRL process itself.

TRL is never a project dependency: this module only starts interpreters that have it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TRL_VENV = HERE / ".venv-trl"
TRL_SCRIPT = HERE / "_trl_grpo_step.py"
TRL_VERSION = "1.16.0"
TRL_REQUIREMENTS = [f"trl=={TRL_VERSION}", "peft", "torch==2.13.0"]  # peft: its LoRA runs (--lora)
CONSTRAINTS = ROOT / "constraints.txt"


TRL_PROBE = (
    "import json, trl, datasets, transformers, accelerate, torch; "
    "print(json.dumps({'trl': trl.__version__, 'torch': torch.__version__, 'cuda': torch.cuda.is_available()}))"
)
TRL_HOWTO = (
    f"provide it with `pip install --target DIR trl=={TRL_VERSION}` (offline: `pip install --no-index --no-deps "
    "--target DIR WHEELS/*.whl` with trl, datasets and what they need beyond torch/transformers/accelerate) "
    "and PYTHONPATH=DIR for this command, or --trl-python PATH (an interpreter that imports trl, datasets, "
    "transformers, accelerate and a CUDA torch); --no-trl measures ours alone"
)


@dataclass(frozen=True)
class TrlRuntime:
    """Where TRL's side runs: the interpreter, whether it keeps this process's environment
    (PYTHONPATH included: a ``pip install --target`` lives there) or gets `_clean_env`'s (a
    virtualenv must not see the project's packages), the TRL version it imported, and why it
    was picked (reported in the JSON as ``trl_source``)."""

    python: str
    keep_env: bool
    trl_version: str
    source: str


def _clean_env(threads: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PYTHONNOUSERSITE"] = "1"
    env["OMP_NUM_THREADS"] = str(threads)
    env["TOKENIZERS_PARALLELISM"] = "false"
    return env


def _trl_env(threads: int, keep_env: bool) -> dict[str, str]:
    """The TRL process's environment: this process's own (``keep_env``) or `_clean_env`'s."""
    if not keep_env:
        return _clean_env(threads)
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false"}


def probe_trl(python: str, keep_env: bool) -> dict[str, Any] | str:
    """``{"trl", "torch", "cuda"}`` as ``python`` reports them after importing TRL and its
    dependencies (in a child process: importing TRL here would change nothing but cost memory),
    or why it could not."""
    try:
        done = subprocess.run([python, "-c", TRL_PROBE], env=_trl_env(1, keep_env), cwd=str(HERE),
                              capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{python}: {exc}"
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        return f"{python}: {lines[-1] if lines else f'exit status {done.returncode}'}"
    try:
        return dict(json.loads(done.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        return f"{python}: unexpected probe output {done.stdout[-200:]!r}"


def resolve_trl(device: str, trl_python: str | None) -> TrlRuntime | str:
    """Where TRL's side runs (order in the module doc), or a sentence saying why it cannot run.

    On cuda nothing is installed: GPU machines are often offline, and a TRL pulled from an index
    would bring its own torch.
    """
    def no_gpu(info: dict[str, Any], where: str) -> str | None:
        if device == "cuda" and not info.get("cuda"):
            return f"{where} imports trl {info.get('trl')}, but its torch {info.get('torch')} sees no GPU"
        return None

    if trl_python:
        errors: list[str] = []
        for keep in (False, True):  # a virtualenv first (clean environment), then with this PYTHONPATH
            info = probe_trl(trl_python, keep)
            if isinstance(info, str):
                errors.append(info)
                continue
            bad = no_gpu(info, f"--trl-python {trl_python}")
            if bad:
                return bad
            if info["trl"] != TRL_VERSION:
                print(f"note: --trl-python {trl_python} has trl {info['trl']}, not {TRL_VERSION}", flush=True)
            source = f"--trl-python {trl_python}" + (" (this environment)" if keep else "")
            return TrlRuntime(trl_python, keep, str(info["trl"]), source)
        return f"--trl-python {trl_python} does not import trl and its dependencies: {errors[-1]}"
    info = probe_trl(sys.executable, True)
    if isinstance(info, dict) and (info["trl"] == TRL_VERSION or device == "cuda"):
        bad = no_gpu(info, f"this interpreter ({sys.executable})")
        if bad is None:
            return TrlRuntime(sys.executable, True, str(info["trl"]), "this interpreter")
        return f"TRL is unavailable on cuda: {bad}; {TRL_HOWTO}"
    if device == "cuda":
        return f"TRL is unavailable on cuda: this interpreter ({sys.executable}) cannot import it ({info}); {TRL_HOWTO}"
    if isinstance(info, dict):
        print(f"this interpreter has trl {info['trl']}, not {TRL_VERSION}: using {TRL_VENV}", flush=True)
    return TrlRuntime(str(ensure_trl_venv()), False, TRL_VERSION, str(TRL_VENV.relative_to(ROOT)))


def ensure_trl_venv() -> Path:
    """Create (or reuse) the TRL virtualenv and return its interpreter (CPU runs only)."""
    py = TRL_VENV / "bin" / "python"
    probe = (
        "import trl, torch, transformers, datasets, accelerate, peft; "
        f"assert trl.__version__ == '{TRL_VERSION}', trl.__version__; "
        "assert torch.__version__.startswith('2.13.0'), torch.__version__"
    )
    env = _clean_env(1)
    if py.exists():
        ok = subprocess.run([str(py), "-c", probe], env=env, cwd=str(HERE), capture_output=True)
        if ok.returncode == 0:
            return py
        print(f"TRL venv at {TRL_VENV} does not import trl {TRL_VERSION} with torch 2.13.0; reinstalling", flush=True)
    else:
        print(f"creating the TRL venv at {TRL_VENV} (trl {TRL_VERSION} from PyPI; takes a few minutes)", flush=True)
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", str(TRL_VENV)], check=True, env=env)
    subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", "-c", str(CONSTRAINTS),
         *TRL_REQUIREMENTS],
        check=True,
        env=env,
    )
    subprocess.run([str(py), "-c", probe], check=True, env=env, cwd=str(HERE))
    return py


def run_trl(work: dict[str, Any], model_dir: Path, out_dir: Path, rows: list[dict[str, Any]],
            runtime: TrlRuntime) -> dict[str, Any]:
    """TRL's side in its own process; returns its JSON, or ``{"error": ...}`` saying why it failed."""
    payload = {**work, "model_dir": str(model_dir), "output_dir": str(out_dir), "rows": rows}
    payload_path = out_dir.parent / "trl_input.json"
    payload_path.write_text(json.dumps(payload))
    stderr_path = out_dir.parent / "trl_stderr.log"
    if work["device"] == "cuda":
        print(f"TRL: {work['warmup_steps'] + work['measured_steps']} steps on cuda with trl {runtime.trl_version} "
              f"({runtime.source}: {runtime.python})", flush=True)
    with open(payload_path) as stdin, open(stderr_path, "w") as err:
        proc = subprocess.Popen(
            [runtime.python, str(TRL_SCRIPT)], stdin=stdin, stdout=subprocess.PIPE, stderr=err,
            text=True, env=_trl_env(work["threads"], runtime.keep_env), cwd=str(HERE),
        )
        last = ""
        for line in proc.stdout or ():
            line = line.rstrip("\n")
            if line.startswith(("trl step", "trl:")):
                print(line, flush=True)
            if line.strip():
                last = line
        rc = proc.wait()
    try:
        out = json.loads(last) if rc == 0 else None
    except json.JSONDecodeError:
        out = None
    if out is None:
        tail = "\n".join(stderr_path.read_text().splitlines()[-30:])
        print(f"TRL run FAILED (exit {rc}); stderr tail:\n{tail}", flush=True)
        return {"error": f"TRL exited with {rc}: {tail.splitlines()[-1] if tail else 'no output'}"}
    return out
