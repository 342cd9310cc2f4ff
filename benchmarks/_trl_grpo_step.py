"""The TRL half of ``benchmarks/trainer_step.py``: seconds per GRPO optimizer step with TRL.

Runs with whichever interpreter ``trainer_step.py`` found TRL in (``benchmarks/.venv-trl``, the
benchmark's own interpreter when TRL imports there, or ``--trl-python``), and never imports the
project (its checkout is taken off ``sys.path``): TRL is not a dependency of this project.

It reads one JSON object on stdin (written by ``trainer_step.py``)::

    {"model_dir": ..., "output_dir": ..., "rows": [{"prompt": [messages], "answer": "a"}, ...],
     "reward": "letter_fraction" | "final_number", "lora": null | {"r", "alpha", "dropout", "target_modules"},
     "prompts_per_step": 8, "num_generations": 8, "max_tokens": 16, "min_tokens": 16,
     "learning_rate": 1e-5, "warmup_steps": 2, "measured_steps": 5, "threads": 2, "seed": 0,
     "device": "cpu", "mixed_precision": "no"}

and trains ``warmup_steps + measured_steps`` optimizer steps with TRL's own
``GRPOTrainer`` the way a TRL user would: ``use_vllm=False`` (completions come
from ``model.generate``), float32 weights (``device``: ``"cpu"``, the default, sets
``use_cpu=True``; ``"cuda"`` trains on the GPU; ``mixed_precision`` ``"bf16"`` sets ``bf16=True``,
bf16 autocast over the float32 weights), no gradient checkpointing, one optimizer step per
generation batch (``per_device_train_batch_size`` = prompts x G, no accumulation,
``num_iterations=1``), ``beta=0`` (no reference model), loss ``"grpo"``. A callback times
every step from ``on_step_begin`` to ``on_step_end``: that span contains the generation
(TRL generates inside ``training_step``), the reward, the advantages, the forward/backward
pass and the optimizer step. On cuda the clocks are read after ``torch.cuda.synchronize()``
and ``peak_gpu_memory_gb`` is ``torch.cuda.max_memory_allocated()`` over the run (GB, 1e9 bytes).

Progress goes to stdout as plain lines; the LAST stdout line is one JSON object.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from typing import Any

# Never import anything from the project's checkout (this file lives inside it).
_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") not in (_REPO_ROOT,)]


def letter_fraction(completions: list[Any], answer: list[str], **_: Any) -> list[float]:
    """TRL reward function with the semantics of ``letter_repeat.letter_fraction``.

    Share of the reply's non-whitespace characters that equal the requested letter; 0 when empty.
    """
    out = []
    for completion, letter in zip(completions, answer, strict=True):
        if isinstance(completion, str):
            text = completion
        else:
            text = "".join(str(m.get("content") or "") for m in completion if m.get("role") == "assistant")
        chars = [c for c in text if not c.isspace()]
        out.append(sum(c == letter for c in chars) / len(chars) if chars else 0.0)
    return out


def final_number(completions: list[Any], answer: list[str], **_: Any) -> list[float]:
    """TRL reward function for arithmetic: 1 when the reply's last integer (a ``\\boxed{}`` one if
    any) is the answer. Its cost is all that matters here: both sides' replies have a fixed length."""
    import re

    out = []
    for completion, expected in zip(completions, answer, strict=True):
        text = completion if isinstance(completion, str) else "".join(
            str(m.get("content") or "") for m in completion if m.get("role") == "assistant")
        boxed = re.findall(r"\\boxed\{\s*(-?\d+)\s*\}", text)
        numbers = boxed or re.findall(r"-?\d+", text)
        out.append(float(bool(numbers) and numbers[-1] == str(expected).strip()))
    return out


REWARDS = {"letter_fraction": letter_fraction, "final_number": final_number}


def main() -> int:
    cfg = json.loads(sys.stdin.read())
    on_gpu = cfg.get("device", "cpu") == "cuda"
    bf16 = cfg.get("mixed_precision", "no") == "bf16"
    import torch

    torch.set_num_threads(int(cfg["threads"]))

    def sync() -> None:
        if on_gpu:  # kernels are queued, not done, when a call returns: wait before reading a clock
            torch.cuda.synchronize()

    import trl
    from datasets import Dataset
    from trl import GRPOTrainer

    timer = _step_timer(sync)
    if on_gpu:
        torch.cuda.reset_peak_memory_stats()
        print(f"trl: on {torch.cuda.get_device_name(0)} (bf16 autocast: {bf16}), trl {trl.__version__}", flush=True)
    trainer = GRPOTrainer(
        model=cfg["model_dir"],
        reward_funcs=REWARDS[cfg.get("reward", "letter_fraction")],
        args=_grpo_config(cfg, on_gpu=on_gpu, bf16=bf16),
        train_dataset=Dataset.from_list(cfg["rows"]),
        callbacks=[timer],
        peft_config=_lora_config(cfg.get("lora")),
    )
    gen_s = _time_generation(trainer, sync)
    trainer.train()
    print(json.dumps(_report(cfg, trainer, timer, gen_s, on_gpu=on_gpu, bf16=bf16)))
    return 0


def _grpo_config(cfg: dict[str, Any], *, on_gpu: bool, bf16: bool) -> Any:
    """TRL's GRPOConfig as a TRL user sets it for this comparison (see the module docstring)."""
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=cfg["output_dir"],
        seed=int(cfg["seed"]),
        max_steps=int(cfg["warmup_steps"]) + int(cfg["measured_steps"]),
        per_device_train_batch_size=int(cfg["prompts_per_step"]) * int(cfg["num_generations"]),
        gradient_accumulation_steps=1,
        num_generations=int(cfg["num_generations"]),
        num_iterations=1,
        max_completion_length=int(cfg["max_tokens"]),
        generation_kwargs={"min_new_tokens": int(cfg["min_tokens"])} if cfg.get("min_tokens") else None,
        temperature=1.0,
        top_p=1.0,
        beta=0.0,
        loss_type="grpo",
        scale_rewards="group",
        epsilon=0.2,
        learning_rate=float(cfg["learning_rate"]),
        lr_scheduler_type="constant",
        adam_beta1=0.9,
        adam_beta2=0.99,
        weight_decay=0.0,
        max_grad_norm=1.0,
        use_vllm=False,
        use_cpu=not on_gpu,
        bf16=bf16,
        fp16=False,
        gradient_checkpointing=False,
        model_init_kwargs={"dtype": "float32"},
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        log_completions=False,
        dataloader_num_workers=0,
    )


def _lora_config(lora: dict[str, Any] | None) -> Any:
    """peft's LoraConfig for ``lora`` (rank, alpha, dropout, target modules), None for full fine-tune."""
    if not lora:
        return None
    from peft import LoraConfig

    return LoraConfig(task_type="CAUSAL_LM", r=int(lora["r"]), lora_alpha=int(lora["alpha"]),
                      lora_dropout=float(lora["dropout"]), target_modules=list(lora["target_modules"]))


def _step_timer(sync: Any) -> Any:
    """A TrainerCallback timing each optimizer step (built here: transformers is imported late)."""
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        """Wall time of each optimizer step, and the completion lengths TRL logs for it."""

        def __init__(self) -> None:
            self.step_s: list[float] = []
            self.cpu_s: list[float] = []
            self.lengths: list[float] = []
            self._t = self._cpu = 0.0

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            sync()
            self._t = time.perf_counter()
            self._cpu = time.process_time()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            sync()
            self.step_s.append(time.perf_counter() - self._t)
            self.cpu_s.append(time.process_time() - self._cpu)
            print(f"trl step {len(self.step_s)}: {self.step_s[-1]:.3f} s (CPU {self.cpu_s[-1]:.3f} s)", flush=True)

        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None,
                   **kwargs: Any) -> None:
            if logs and "completions/mean_length" in logs:
                self.lengths.append(float(logs["completions/mean_length"]))

    return StepTimer()


def _time_generation(trainer: Any, sync: Any) -> list[float]:
    """Seconds of each generation batch: TRL's private ``_generate_and_score_completions``, when present."""
    gen_s: list[float] = []
    inner = getattr(trainer, "_generate_and_score_completions", None)
    if inner is None:
        return gen_s

    def timed(*a: Any, **k: Any) -> Any:
        sync()
        t = time.perf_counter()
        try:
            return inner(*a, **k)
        finally:
            sync()
            gen_s.append(time.perf_counter() - t)

    trainer._generate_and_score_completions = timed
    return gen_s


def _report(cfg: dict[str, Any], trainer: Any, timer: Any, gen_s: list[float], *, on_gpu: bool, bf16: bool) -> dict:
    import torch
    import transformers
    import trl

    warm = int(cfg["warmup_steps"])
    measured = timer.step_s[warm:]
    lengths = timer.lengths[warm:] or timer.lengths
    return {
        "trl_version": trl.__version__,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "step_s": timer.step_s,
        "step_cpu_s": timer.cpu_s,
        "s_per_step": statistics.median(measured) if measured else None,
        "cpu_s_per_step": statistics.median(timer.cpu_s[warm:]) if measured else None,
        "generation_s": statistics.median(gen_s[warm:]) if len(gen_s) > warm else None,
        "step_generation_s": gen_s,
        "step_lengths": timer.lengths,
        "mean_completion_length": statistics.fmean(lengths) if lengths else None,
        "device": "cuda" if on_gpu else "cpu",
        "model_device": str(trainer.model.device),
        "bf16": bf16,
        "peak_gpu_memory_gb": torch.cuda.max_memory_allocated() / 1e9 if on_gpu else None,
    }


if __name__ == "__main__":
    raise SystemExit(main())
