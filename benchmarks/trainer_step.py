"""Trainer benchmark: seconds per GRPO optimizer step, our trainer vs TRL's ``GRPOTrainer``.

    python benchmarks/trainer_step.py              # both trainers, under a minute on 2 cores
    python benchmarks/trainer_step.py --rounds 3   # ours, TRL, ours, TRL, ...: steadier on a shared machine
    python benchmarks/trainer_step.py --no-trl     # our trainer only
    python benchmarks/trainer_step.py --natural-lengths   # let both sides stop at EOS
    python benchmarks/trainer_step.py --size 25m --warmup 1 --steps 4   # 25M parameters (about 1.5 minutes)
    python benchmarks/trainer_step.py --size 104m --warmup 1 --steps 2  # 104M parameters (about 3 minutes)
    python benchmarks/trainer_step.py --no-trl --iterations 2   # ours only, two optimizer passes per batch
    python benchmarks/trainer_step.py --device cuda --mixed-precision bf16 --size 250m --warmup 2 --steps 4
    python benchmarks/trainer_step.py --model smollm2-135m-instruct --matrix --warmup 1 --steps 2   # a real model

``--model NAME`` trains a real model (a registry name or a ``save_pretrained`` directory) on the
real-model recipe's task (`examples/configs/arithmetic_smollm2.toml`: arithmetic, its system
prompt; TRL's reward is the reply's last integer against the answer), 32 completion tokens by
default; ``--lora`` trains a rank-8 adapter on the attention projections on both sides (TRL through
peft's ``LoraConfig``); ``--matrix`` measures 32 and 128 tokens, full fine-tune and LoRA, in one
run, and prints their table before the JSON (``matrix``, and every measurement under ``runs``).

Both trainers train the SAME tiny model directory (built once per run with
``python -m verifiers.models.tiny``: llama, hidden 128, intermediate 384, 4 layers,
4 heads / 2 KV heads, character tokenizer; ``--size 25m`` and ``--size 104m`` are the larger
shapes in `SIZES`, and the shape flags override any of them) on the SAME workload, on the CPU with the same
number of torch threads (``--threads``, default 1: on a small machine shared with other
work, OpenMP's spin-waiting makes multi-threaded step times erratic, in CPU time as well as
in wall time):

* prompts: the ``letter-repeat`` environment's training split (``"Say a"`` ... as one user
  message), ``prompts_per_step`` unique prompts x ``G`` samples = one optimizer step;
* completions of exactly ``max_tokens`` tokens: end-of-sequence is suppressed until then
  (ours: ``min_tokens`` in the request; TRL: ``min_new_tokens`` in ``generation_kwargs``),
  so both sides generate and train on the same number of tokens (``--natural-lengths``
  drops that; the mean lengths are reported either way);
* reward: the share of the reply's characters that equal the requested letter;
* every row through the loss, a group whose rewards are all equal too (our ``skip_zero_advantage``
  off, as TRL has no such skip; `zero_advantage_skip.py` measures the skip);
* GRPO with group-std-scaled advantages, clipped surrogate (eps 0.2), per-sequence mean
  (TRL ``loss_type="grpo"``), ``beta = 0`` (no reference model), ``num_iterations = 1``, no
  gradient accumulation, AdamW (betas 0.9/0.99), lr 1e-5 constant, grad-norm clip 1.0,
  float32, no gradient checkpointing.

A step is everything from asking for the batch to the updated weights: generation (ours:
the embedded inference engine behind the OpenAI-style in-process client, one request per
sample; TRL: ``model.generate`` on the padded batch, ``use_vllm=False``), scoring,
advantages, the forward/backward pass and the optimizer step. Ours is read from
``metrics.jsonl`` (``time/step_s``); TRL's is timed by a ``TrainerCallback`` from
``on_step_begin`` to ``on_step_end``. The first ``--warmup`` steps are dropped on each side
and the median of the next ``--steps`` is reported. With ``--rounds N`` the two sides run
alternately N times each (a fresh trainer every round, its first ``--warmup`` steps dropped) and
each side's figure is the median of all its measured steps; the per-round ratios are printed
and kept in ``rounds``, so a reader sees how far the machine moved the figure. Target:
ours / TRL <= 0.5 (wall clock).
The process CPU time of each step (all threads) is reported beside it: where wall time is
far above CPU time, the step waited rather than computed.

The learner against the machine's limit: ``peak_tflops`` is one ``2048 x 2048`` float32 matmul
with the same torch thread count (PyTorch's or oneDNN's, whichever is faster), measured in the
same run (best of 10; see `peak_tflops`);
``learner_tflops`` is the forward+backward FLOPs of a step (`train_flops`: 6 x parameters x
tokens the model runs, shared prompts once, each row's last token (which predicts nothing and is
not run) left out, attention products left out) over the learner's
time (old/reference logprobs + forward+backward + optimizer), and ``learner_mfu`` their ratio.
``fwd_bwd_cpu_mfu`` uses the forward+backward's own thread CPU time instead of wall time (on a
busy shared machine wall time also holds the time other processes had the core). Our step's
phases (``ours_phases_s``, medians; every step's in ``ours_step_phases``): generation, batch
build, logprobs, forward+backward, optimizer, the learner's rest.

On a GPU (``--device cuda``) both sides train on the GPU: ours (the trainer's accelerator
picks CUDA when torch sees it) and TRL with ``use_cpu=False``; ``--mixed-precision bf16``
autocasts both sides' forward passes to bf16 over float32 master weights (ours:
``mixed_precision = "bf16"``, TRL: ``bf16=True``). ``--max-tokens`` defaults to 128 there (16
on a CPU), the issue's GPU workload; ``--size 250m`` and ``--size 1b`` are its two GPU shapes.
The peak is the GPU's own ``8192^3`` matmul rate in the same run (bf16, or float32 without TF32),
timers synchronize the device, each side's peak GPU memory is reported; ``--device cpu`` hides CUDA.

TRL is never a project dependency. Its side runs ``benchmarks/_trl_grpo_step.py`` with, in
order: ``--trl-python PATH``; else this interpreter, when ``import trl`` works here (TRL
``1.16.0``, or any version on cuda, reported) -- with this process's environment, PYTHONPATH
kept, so a ``pip install --target DIR`` + ``PYTHONPATH=DIR`` install works on a bare offline GPU
machine; else, on a CPU only, ``benchmarks/.venv-trl`` (created on first use with
``python -m venv`` + pip, torch pinned by ``constraints.txt``; reused when it imports). On cuda
without TRL the run says how to provide it and measures ours alone.

The LAST stdout line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:  # run from a checkout without an editable install
    sys.path.insert(0, str(ROOT))
if str(HERE) not in sys.path:  # the script's own helpers (_step_meter)
    sys.path.insert(0, str(HERE))

from _step_meter import (  # noqa: E402, F401, I001  (re-exported: the benchmark's figures come from these)
    GPU_PEAK_N, PhaseTimer, _fmt, _max_of, _measured, _round_figures, cuda_sync, gpu_memory_gb, gpu_peak_tflops,
    learner_figures, learner_line, machine_peak, matmul_params, model_line, peak_tflops, step_line, summarize_ours,
    summarize_trl, train_flops,
)

from _trl_runtime import (  # noqa: E402, F401  (re-exported: tests and other benchmarks use them)
    TRL_VERSION, TrlRuntime, _trl_env, ensure_trl_venv, probe_trl, resolve_trl, run_trl,
)
ENV_ID = "letter-repeat"
TARGET_RATIO = 0.5
SIZES = {  # --size presets: the shapes the figures are taken at
    "0.8m": {"hidden_size": 128, "intermediate_size": 384, "layers": 4, "heads": 4, "kv_heads": 2},
    "25m": {"hidden_size": 512, "intermediate_size": 1536, "layers": 8, "heads": 8, "kv_heads": 4},
    "104m": {"hidden_size": 768, "intermediate_size": 3072, "layers": 12, "heads": 12, "kv_heads": 4},
    # the GPU shapes (issue 39): 252M, and TinyLlama's 1.1B body (0.97B here: a 111-token vocabulary)
    "250m": {"hidden_size": 1024, "intermediate_size": 4096, "layers": 16, "heads": 16, "kv_heads": 8},
    "1b": {"hidden_size": 2048, "intermediate_size": 5632, "layers": 22, "heads": 32, "kv_heads": 4},
}
MAX_TOKENS = {"cpu": 16, "cuda": 128}  # --max-tokens default per --device
REAL_CONFIG = ROOT / "examples" / "configs" / "arithmetic_smollm2.toml"
"""--model: the real-model recipe whose task (arithmetic, its system prompt) both sides train on."""
MATRIX = ((32, False), (128, False), (32, True), (128, True))
"""--matrix: (completion tokens, LoRA) of each measurement, in the order they run."""
LORA = {"r": 8, "alpha": 16, "dropout": 0.0, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}
"""--lora on both sides: our trainer's default adapter (rank 8 on the attention projections)."""


# -- the workload -------------------------------------------------------------------------


def real_model(name: str) -> tuple[Path, dict[str, Any]]:
    """``--model``: the model's directory (a registry name is fetched and converted once) and its shape."""
    from verifiers.models.source import resolve_model

    model_dir = resolve_model(name)
    cfg = json.loads((model_dir / "config.json").read_text())
    keys = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads")
    return model_dir, {"arch": cfg.get("model_type", "?"), "name": name, **{k: cfg[k] for k in keys}}


def task(args: argparse.Namespace) -> dict[str, Any]:
    """The environment both sides train on and the reward TRL's side computes the same way: the
    tiny model's letter-repeat, or with ``--model`` the real-model recipe's arithmetic."""
    if args.model is None:
        return {"env_id": ENV_ID, "reward": "letter_fraction",
                "env_args": {"letters": "abcd", "num_train_examples": 512, "num_eval_examples": 0, "seed": 0}}
    recipe = tomllib.loads(REAL_CONFIG.read_text())
    return {"env_id": recipe["env_id"], "env_args": dict(recipe.get("env_args", {})), "reward": "final_number"}


def workload(args: argparse.Namespace) -> dict[str, Any]:
    """Everything both sides must agree on, in one place."""
    tiny = {
        "arch": "llama",
        "hidden_size": args.hidden_size,
        "intermediate_size": args.intermediate_size,
        "num_hidden_layers": args.layers,
        "num_attention_heads": args.heads,
        "num_key_value_heads": args.kv_heads,
    }
    return {
        "model": real_model(args.model)[1] if args.model else tiny,
        **task(args),
        "lora": LORA if args.lora else None,
        "prompts_per_step": args.prompts,
        "num_generations": args.G,
        "max_tokens": args.max_tokens,
        "min_tokens": 0 if args.natural_lengths else args.max_tokens,
        "learning_rate": 1e-5,
        "warmup_steps": args.warmup,
        "measured_steps": args.steps,
        "threads": args.threads,
        "device": args.device,
        "mixed_precision": args.mixed_precision,
        "ahead": args.ahead,
        "num_iterations": args.iterations,
        "seed": 0,
    }


def build_model(spec: dict[str, Any], out: Path) -> Path:
    """One tiny model directory for both trainers, written by the project's own CLI."""
    from verifiers.errors import VFError

    cmd = [
        sys.executable, "-m", "verifiers.models.tiny", str(out),
        "--arch", spec["arch"],
        "--hidden-size", str(spec["hidden_size"]),
        "--intermediate-size", str(spec["intermediate_size"]),
        "--layers", str(spec["num_hidden_layers"]),
        "--heads", str(spec["num_attention_heads"]),
        "--kv-heads", str(spec["num_key_value_heads"]),
    ]
    done = subprocess.run(cmd, cwd=str(ROOT), capture_output=True, text=True)
    if done.returncode != 0:
        raise VFError(f"building the tiny model failed ({' '.join(cmd)}):\n{done.stderr[-2000:]}")
    return out


def training_rows(env_args: dict[str, Any], env_id: str = ENV_ID) -> list[dict[str, Any]]:
    """The environment's training split as TRL dataset rows (chat ``prompt`` + ``answer``)."""
    import verifiers as vf

    env = vf.load_environment(env_id, **env_args)
    return [{"prompt": list(r["prompt"]), "answer": r["answer"]} for r in env.get_dataset().rows]


def param_count(model_dir: Path) -> int:
    """Parameters in the saved weights (tied embeddings counted once, as saved)."""
    from safetensors import safe_open

    total = 0
    with safe_open(str(model_dir / "model.safetensors"), framework="pt") as f:
        for key in f.keys():  # noqa: SIM118 - safe_open handles are not iterable
            n = 1
            for d in f.get_slice(key).get_shape():
                n *= d
            total += n
    return total


# -- the machine's limit and the learner's FLOPs --------------------------------------------
















# -- our trainer --------------------------------------------------------------------------


def our_config(work: dict[str, Any], model_dir: Path, out_dir: Path) -> Any:
    """Our trainer's config for ``work``: GRPO, constant learning rate, no sample tables or plots."""
    from trainers.grpo.config import TrainConfig

    return TrainConfig(
        model=str(model_dir),
        env_id=work["env_id"],
        env_args=work["env_args"],
        **({"lora": True, "lora_r": work["lora"]["r"], "lora_alpha": work["lora"]["alpha"],
            "lora_dropout": work["lora"]["dropout"], "lora_target_modules": work["lora"]["target_modules"]}
           if work["lora"] else {}),
        output_dir=str(out_dir),
        seed=work["seed"],
        algorithm="grpo",
        prompts_per_step=work["prompts_per_step"],
        num_generations=work["num_generations"],
        gradient_accumulation_steps=1,
        num_iterations=work["num_iterations"],
        skip_zero_advantage=False,  # TRL runs every row through the loss: so do we (a group of equal rewards too)
        max_steps=work["warmup_steps"] + work["measured_steps"],
        max_tokens=work["max_tokens"],
        temperature=1.0,
        top_p=1.0,
        learning_rate=work["learning_rate"],
        lr_scheduler="constant",
        adam_beta1=0.9,
        adam_beta2=0.99,
        weight_decay=0.0,
        max_grad_norm=1.0,
        torch_threads=work["threads"],
        mixed_precision=work["mixed_precision"],
        num_batches_ahead=work["ahead"],
        num_sample_completions=0,
        plot=False,
        progress=False,
    )


def run_ours(work: dict[str, Any], model_dir: Path, out_dir: Path) -> dict[str, Any]:
    from rich.console import Console

    from trainers.grpo.run.reporting import read_metrics
    from trainers.grpo.trainer import GRPOTrainer

    cpu_s: list[float] = []
    phases: list[dict[str, float]] = []
    on_gpu = work["device"] == "cuda"
    sync = cuda_sync if on_gpu else None

    class FixedLengthTrainer(GRPOTrainer):
        """Our trainer, with EOS suppressed for the first ``min_tokens`` tokens of every sample.

        It also records the process CPU time of each step (all threads: the engine's, the
        generator's and the learner's), from asking for the batch to the optimizer step, and
        the learner's phases (`PhaseTimer`). On a GPU it waits for the optimizer step's kernels
        before the step's clock stops, and says when each step has trained (a run that fails
        shows how far it got).
        """

        _cpu0 = 0.0

        def setup(self) -> None:
            super().setup()
            if work["min_tokens"]:
                extra = {**self.sampling_args.get("extra_body", {}), "min_tokens": work["min_tokens"]}
                self.sampling_args = {**self.sampling_args, "extra_body": extra}
                self.generator.sampling_args = dict(self.sampling_args)
            self._timer = PhaseTimer(self.learner, sync)
            if on_gpu:
                print(f"ours: model on {self.policy.device}, engine decoding with "
                      f"{self.sync.engine.decode_path if hasattr(self.sync, 'engine') else 'a server'}", flush=True)

        def _take_batch(self) -> Any:
            self._cpu0 = time.process_time()
            return super()._take_batch()

        def _train_on(self, batch: Any) -> dict[str, float]:
            self._timer.reset()
            out = super()._train_on(batch)
            if sync is not None:
                sync()
            cpu_s.append(time.process_time() - self._cpu0)
            phases.append(self._timer.snapshot())
            if on_gpu:
                print(f"ours step {len(cpu_s)} trained", flush=True)
            return out

    cfg = our_config(work, model_dir, out_dir)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the weight-loading bar would interleave with the step lines
    import torch

    if on_gpu:
        torch.cuda.reset_peak_memory_stats()
        print(f"ours: training {cfg.max_steps} steps on cuda ({work['mixed_precision']} mixed precision)", flush=True)
    trainer = FixedLengthTrainer(cfg, console=Console(quiet=True))
    trainer.train()
    peak_gb = gpu_memory_gb() if on_gpu else None
    del trainer
    if on_gpu:  # hand the cached blocks back: TRL's process needs them next
        import gc

        gc.collect()
        torch.cuda.empty_cache()
    rows = [r for r in read_metrics(out_dir / "metrics.jsonl") if "time/step_s" in r]
    step_s = [float(r["time/step_s"]) for r in rows]
    for i, (s, c) in enumerate(zip(step_s, cpu_s, strict=True), 1):
        print(f"ours step {i}: {s:.3f} s (CPU {c:.3f} s)", flush=True)
    for p, r in zip(phases, rows, strict=True):  # the step's other phases, from its metrics row
        p["generation_s"] = float(r["time/generation_s"])
        p["train_s"] = float(r["time/train_s"])
        p["build_batch_s"] = float(r["time/step_s"]) - p["generation_s"] - p["train_s"]
        p["learner_other_s"] = p["train_s"] - p["logprobs_s"] - p["fwd_bwd_s"] - p["optimizer_s"]
        p["completion_length"] = float(r["completions/mean_length"])
    return {"phases": phases, "step_s": step_s, "step_cpu_s": cpu_s, "torch_version": torch.__version__,
            "peak_gpu_memory_gb": peak_gb}








# -- main ---------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-trl", action="store_true", help="measure our trainer only")
    ap.add_argument("--natural-lengths", action="store_true", help="do not suppress EOS (lengths may differ)")
    ap.add_argument("--warmup", type=int, default=2, help="steps dropped on each side (default 2)")
    ap.add_argument("--steps", type=int, default=8, help="measured steps on each side (default 8)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="alternate ours and TRL this many times and pool the steps (default 1; 3 on a shared machine)")
    ap.add_argument("--size", choices=list(SIZES), default="0.8m",
                    help="model shape preset (0.8m, 25m, 104m; 250m and 1b for a GPU); the shape flags below override it")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="where both sides train (default cpu; cuda: one GPU, see the module doc)")
    ap.add_argument("--mixed-precision", choices=["no", "bf16"], default="no",
                    help="bf16: both sides' forward passes under bf16 autocast over float32 weights (default no)")
    ap.add_argument("--trl-python", default=None, metavar="PATH",
                    help="run TRL's side with this interpreter (default: this one when it imports trl, "
                         "else benchmarks/.venv-trl on a CPU)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads on both sides (default 1: see the module doc; on cuda the host's threads)")
    ap.add_argument("--ahead", type=int, default=0,
                    help="our num_batches_ahead (0 = synchronous like TRL without vLLM; 1 = generate the next batch while training)")
    ap.add_argument("--iterations", type=int, default=1,
                    help="our num_iterations (optimizer passes per batch; > 1 needs --no-trl: TRL's side runs 1)")
    ap.add_argument("--prompts", type=int, default=8, help="unique prompts per step (default 8)")
    ap.add_argument("--G", type=int, default=8, help="samples per prompt (default 8)")
    ap.add_argument("--max-tokens", type=int, default=None,
                    help="completion tokens (default 16 on cpu, 128 on cuda: the issue's GPU workload)")
    ap.add_argument("--model", default=None, metavar="NAME",
                    help="a real model (registry name or directory) on the real-model recipe's task "
                         f"({REAL_CONFIG.name}: arithmetic) instead of a tiny one; --size and the shape flags are ignored")
    ap.add_argument("--lora", action="store_true", help="both sides train a LoRA adapter (rank 8, attention)")
    ap.add_argument("--matrix", action="store_true",
                    help="one run of four: 32 and 128 completion tokens, full fine-tune and LoRA (with --model)")
    ap.add_argument("--hidden-size", type=int, default=None)
    ap.add_argument("--intermediate-size", type=int, default=None)
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--heads", type=int, default=None)
    ap.add_argument("--kv-heads", type=int, default=None)
    args = ap.parse_args(argv)
    for key, value in SIZES[args.size].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.max_tokens is None:
        args.max_tokens = 32 if args.model else MAX_TOKENS[args.device]
    if args.max_tokens < 1 or args.threads < 1:
        ap.error("need --max-tokens >= 1 and --threads >= 1")
    if args.rounds < 1:
        ap.error("need --rounds >= 1")
    if args.warmup < 0 or args.steps < 1:
        ap.error("need --warmup >= 0 and --steps >= 1")
    if args.iterations < 1 or (args.iterations > 1 and not args.no_trl):
        ap.error("--iterations N > 1 measures our trainer only: add --no-trl (TRL's side runs one pass)")
    if args.G < 2:
        ap.error("GRPO needs --G >= 2 (TRL refuses fewer)")
    return args


def prepare_device(device: str, mixed_precision: str) -> str | None:
    """Make ``device`` the one both sides train on; the GPU's name (None on a CPU). Exits with a
    clear message when cuda is asked for and torch sees no GPU.

    On a CPU run CUDA is hidden from this process and its children (before torch loads): our
    trainer's accelerator takes a GPU whenever torch sees one, which would put ours on the GPU
    and TRL (``use_cpu=True``) on the CPU.
    """
    if device == "cpu":
        if "torch" not in sys.modules:
            os.environ["CUDA_VISIBLE_DEVICES"] = ""
        return None
    import torch

    if not torch.cuda.is_available():
        raise SystemExit(f"--device cuda: torch {torch.__version__} (CUDA build {torch.version.cuda}) sees no GPU "
                         f"here (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}); run on a GPU "
                         "machine with a CUDA build of torch, or use --device cpu")
    if mixed_precision == "bf16" and not torch.cuda.is_bf16_supported():
        raise SystemExit(f"--mixed-precision bf16: {torch.cuda.get_device_name(0)} has no bf16; use --mixed-precision no")
    name = torch.cuda.get_device_name(0)
    print(f"device: cuda:0 {name} (torch {torch.__version__}, CUDA {torch.version.cuda})", flush=True)
    return name


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    gpu_name = prepare_device(args.device, args.mixed_precision)
    runtime: TrlRuntime | str | None = None
    if not args.no_trl:  # before anything slow: a missing TRL should be said at once
        runtime = resolve_trl(args.device, args.trl_python)
        if isinstance(runtime, str):
            print(f"TRL: {runtime}", flush=True)
        elif args.device == "cuda":
            print(f"TRL: trl {runtime.trl_version} via {runtime.source} ({runtime.python})", flush=True)
    if not args.matrix:
        result, ok = measure(args, runtime, gpu_name)
        print(json.dumps(result))
        return 0 if ok else 1
    runs, all_ok = [], True
    for tokens, lora in MATRIX:  # one run: both budgets, full fine-tune and LoRA
        print(f"== {tokens} completion tokens, {'LoRA' if lora else 'full fine-tune'}", flush=True)
        result, ok = measure(argparse.Namespace(**{**vars(args), "max_tokens": tokens, "lora": lora}), runtime,
                             gpu_name)
        runs.append(result)
        all_ok = all_ok and ok
    table = [{"max_tokens": r["max_tokens"], "lora": bool(r["lora"]), "ours_s_per_step": r["ours_s_per_step"],
              "trl_s_per_step": r["trl_s_per_step"], "ratio": r["ratio"]} for r in runs]
    for row in table:
        print(f"{row['max_tokens']:4d} tokens {'LoRA' if row['lora'] else 'full':4s}: ours {_fmt(row['ours_s_per_step'])} s,"
              f" TRL {_fmt(row['trl_s_per_step'])} s, ratio {_fmt(row['ratio'])}", flush=True)
    print(json.dumps({"matrix": table, "target_ratio": TARGET_RATIO, "model": runs[0]["model"],
                      "pass": all(r["pass"] for r in runs), "runs": runs}))
    return 0 if all_ok else 1


def measure(args: argparse.Namespace, runtime: TrlRuntime | str | None,
            gpu_name: str | None) -> tuple[dict[str, Any], bool]:
    """One workload, ours then TRL's in each round: its figures, and whether every side measured."""
    on_gpu = args.device == "cuda"
    work = workload(args)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="vf-trainer-step-") as tmp:
        root = Path(tmp)
        model_dir = real_model(args.model)[0] if args.model else build_model(work["model"], root / "model")
        params = param_count(model_dir)
        print(model_line(work, params), flush=True)
        body_params, head_params = matmul_params(model_dir, params)
        peak, peak_kind = machine_peak(on_gpu, args.mixed_precision, work["threads"], gpu_name)
        # Rounds alternate ours and TRL, so a machine that slows down or speeds up mid-run (other
        # tenants) weighs on both sides alike; each side's figure is the median of all its rounds' steps.
        ours_rounds: list[dict[str, Any]] = []
        trl_rounds: list[dict[str, Any]] = []
        rows = training_rows(work["env_args"], work["env_id"]) if isinstance(runtime, TrlRuntime) else None
        for k in range(args.rounds):
            if args.rounds > 1:
                print(f"round {k + 1} of {args.rounds}", flush=True)
            ours_rounds.append(run_ours(work, model_dir, root / f"ours{k}"))
            # Our trainer ran in this process and kept what it freed (`retain_freed_memory`): after its
            # 128-token real-model steps the process held 16.5 GB while TRL's subprocess grew, and the
            # OOM killer ended the --matrix run (24 GB machine). Handed back before the next side runs.
            from trainers.grpo.dist.heap import give_back_freed_memory

            give_back_freed_memory()
            if rows is not None and isinstance(runtime, TrlRuntime):
                trl_rounds.append(run_trl(work, model_dir, root / f"trl{k}", rows, runtime))
                if trl_rounds[-1].get("error"):
                    break
        ours = summarize_ours(ours_rounds, work["warmup_steps"])
        trl: dict[str, Any] = {"error": "skipped (--no-trl)" if runtime is None else runtime}
        if rows is not None:
            trl = summarize_trl(trl_rounds, work["warmup_steps"])
    rounds = [_round_figures(o, t, work["warmup_steps"]) for o, t in zip(ours_rounds, trl_rounds or
                                                                          [{}] * len(ours_rounds), strict=False)]
    ours_s, trl_s = ours.get("s_per_step"), trl.get("s_per_step")
    ratio = ours_s / trl_s if ours_s and trl_s else None
    ours_cpu, trl_cpu = ours.get("cpu_s_per_step"), trl.get("cpu_s_per_step")
    cpu_ratio = ours_cpu / trl_cpu if ours_cpu and trl_cpu else None
    verdict = "n/a" if ratio is None else ("PASS" if ratio <= TARGET_RATIO else "FAIL")
    learner = learner_figures(ours, body_params, head_params, peak, peak_kind, on_gpu)
    print(learner_line(ours, learner, on_gpu), flush=True)
    if on_gpu:
        print(f"peak GPU memory: ours {_fmt(ours.get('peak_gpu_memory_gb'))} GB, "
              f"TRL {_fmt(trl.get('peak_gpu_memory_gb'))} GB", flush=True)
    print(step_line(ours, trl, ratio, cpu_ratio, verdict, rounds, TARGET_RATIO), flush=True)
    result = {
        "ours_s_per_step": ours_s,
        "trl_s_per_step": trl_s,
        "ratio": ratio,
        "target_ratio": TARGET_RATIO,
        "ours_cpu_s_per_step": ours_cpu,
        "trl_cpu_s_per_step": trl_cpu,
        "cpu_ratio": cpu_ratio,
        "pass": None if ratio is None else ratio <= TARGET_RATIO,
        "model": {**work["model"], "params": params},
        "env_id": work["env_id"],
        "lora": work["lora"],
        "prompts_per_step": work["prompts_per_step"],
        "num_generations": work["num_generations"],
        "max_tokens": work["max_tokens"],
        "eos_suppressed": bool(work["min_tokens"]),
        "torch_threads": work["threads"],
        "ours_num_batches_ahead": work["ahead"],
        "ours_num_iterations": work["num_iterations"],
        "warmup_steps": work["warmup_steps"],
        "measured_steps": work["measured_steps"],
        "rounds": rounds,
        "ours_mean_completion_length": ours.get("mean_completion_length"),
        "trl_mean_completion_length": trl.get("mean_completion_length"),
        "ours_generation_s": ours.get("generation_s"),
        "ours_train_s": ours.get("train_s"),
        **learner,
        "trl_generation_s": trl.get("generation_s"),
        "ours_step_s": ours.get("step_s"),
        "trl_step_s": trl.get("step_s"),
        "ours_step_cpu_s": ours.get("step_cpu_s"),
        "ours_step_phases": ours.get("phases"),
        "trl_step_cpu_s": trl.get("step_cpu_s"),
        "trl_version": trl.get("trl_version"),
        "trl_transformers_version": trl.get("transformers_version"),
        "torch_version": ours.get("torch_version"),
        "trl_torch_version": trl.get("torch_version"),
        "trl_error": trl.get("error") if not args.no_trl else None,
        "device": args.device,
        "gpu_name": gpu_name,
        "mixed_precision": args.mixed_precision,
        "ours_peak_gpu_memory_gb": ours.get("peak_gpu_memory_gb"),
        "trl_peak_gpu_memory_gb": trl.get("peak_gpu_memory_gb"),
        "trl_python": runtime.python if isinstance(runtime, TrlRuntime) else None,
        "trl_source": runtime.source if isinstance(runtime, TrlRuntime) else None,
        "elapsed_s": time.perf_counter() - t0,
    }
    return result, ours_s is not None and (args.no_trl or trl_s is not None)


if __name__ == "__main__":
    raise SystemExit(main())
