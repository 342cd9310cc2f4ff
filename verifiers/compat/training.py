"""0.1.x training scripts on our trainer: ``vf.GRPOConfig``, ``vf.GRPOTrainer(model=..., env=...,
args=..., processing_class=..., peft_config=...)``, ``vf.grpo_defaults``, ``vf.lora_defaults``,
``vf.get_model_and_tokenizer``.

0.1.x's trainer subclassed transformers' ``Trainer`` and its config ``TrainingArguments``.
Ours is a short loop configured by `trainers.grpo.config.TrainConfig`; this module maps
every 0.1.x field onto it, or refuses it by name when it is set to a value we cannot
honour (silently training something else would be worse than stopping). Imported
lazily from ``verifiers`` (it needs torch, the ``train`` extra) and it imports
``trainers`` only here, so the core never depends on the trainer.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

from verifiers.errors import ConfigError

# 0.1.x GRPOConfig fields (GRPO-specific and the TrainingArguments it surfaced), with 0.1.x defaults.
DEFAULTS: dict[str, Any] = {
    "output_dir": "", "run_name": None, "lr_scheduler_type": None, "warmup_steps": 0, "max_steps": -1,
    "bf16": False, "max_grad_norm": 1.0, "per_device_train_batch_size": 8, "gradient_accumulation_steps": 1,
    "gradient_checkpointing": False, "save_strategy": "steps", "save_steps": 500, "save_only_model": False,
    "logging_steps": 500, "log_on_each_node": True, "report_to": None, "disable_dropout": False,
    "remove_unused_columns": False, "max_prompt_length": 512, "num_generations": 8, "rollout_filter_ratio": 1.0,
    "max_completion_length": None, "ds3_gather_for_generation": True, "shuffle_dataset": True,
    "generation_batch_size": None, "steps_per_generation": None, "max_tokens": None, "max_seq_len": 2048,
    "temperature": 1.0, "top_p": 1.0, "top_k": None, "min_p": None, "repetition_penalty": 1.0,
    "presence_penalty": 0.0, "frequency_penalty": 0.0, "max_data_workers": 8, "max_concurrent": 1024,
    "num_batches_ahead": 1, "async_generation_timeout": 600.0, "async_max_queue_size": None,
    "vllm_guided_decoding_regex": None, "vllm_server_host": "0.0.0.0", "vllm_server_port": 8000,
    "vllm_server_timeout": 300.0, "learning_rate": 1e-6, "beta": 0.001, "num_iterations": 1, "epsilon": 0.2,
    "delta": None, "epsilon_high": None, "scale_rewards": False, "loss_type": "dr_grpo",
    "mask_env_responses": True, "mask_truncated_completions": True, "zero_truncated_completions": False,
    "sync_ref_model": True, "ref_model_mixup_alpha": 0.5, "ref_model_sync_steps": 100,
    "model_init_kwargs": None, "seed": 42, "weight_decay": 0.0, "adam_beta1": 0.9, "adam_beta2": 0.999,
    "num_train_epochs": 3.0, "save_total_limit": None, "logging_dir": None, "eval_strategy": "no",
    "eval_steps": None, "per_device_eval_batch_size": 8, "push_to_hub": False, "log_completions": False,
}

# Accepted, with no effect on what is trained (bookkeeping our trainer does its own way).
NO_EFFECT = {
    "run_name", "save_only_model", "log_on_each_node", "remove_unused_columns", "max_data_workers",
    "async_max_queue_size", "vllm_server_timeout", "ds3_gather_for_generation", "logging_dir",
    "disable_dropout", "num_train_epochs", "per_device_eval_batch_size", "log_completions", "model_init_kwargs",
    "shuffle_dataset", "sync_ref_model", "ref_model_mixup_alpha", "ref_model_sync_steps",
}

# Refused when set to anything but the default, with the reason.
UNSUPPORTED = {
    "rollout_filter_ratio": "reward-ranked rollout filtering is not implemented",
    "delta": "two-sided clipping (delta) is not implemented; use our 'dual_clip' via algorithm presets",
    "zero_truncated_completions": "use mask_truncated_completions instead",
    "min_p": "min_p sampling is not supported by every backend here",
    "repetition_penalty": "sampling penalties are not supported by the embedded engine",
    "presence_penalty": "sampling penalties are not supported by the embedded engine",
    "frequency_penalty": "sampling penalties are not supported by the embedded engine",
    "vllm_guided_decoding_regex": "guided decoding is not supported",
    "mask_env_responses": "environment tokens are always masked out of the loss",
    "generation_batch_size": "one generation batch per optimizer step (prompts_per_step)",
    "steps_per_generation": "one generation batch per optimizer step (prompts_per_step)",
    "eval_strategy": "in-training evaluation is configured with eval_every in TrainConfig",
    "eval_steps": "in-training evaluation is configured with eval_every in TrainConfig",
    "push_to_hub": "nothing is uploaded; the model is saved under output_dir",
    "save_total_limit": "use keep_checkpoints in TrainConfig",
}


class GRPOConfig:
    """The 0.1.x config: keyword arguments with 0.1.x names and defaults; an unknown name is a TypeError
    (as for the dataclass it replaces). `to_train_config` does the mapping."""

    def __init__(self, **kwargs: Any) -> None:
        unknown = sorted(set(kwargs) - set(DEFAULTS))
        if unknown:
            raise TypeError(
                f"GRPOConfig got unexpected keyword argument(s) {unknown}; 0.1.x fields accepted: "
                f"{', '.join(sorted(DEFAULTS))}"
            )
        for key, default in DEFAULTS.items():
            setattr(self, key, kwargs.get(key, default))

    def non_default(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k, d in DEFAULTS.items() if getattr(self, k) != d}

    def __repr__(self) -> str:
        return f"GRPOConfig({', '.join(f'{k}={v!r}' for k, v in self.non_default().items())})"


def grpo_defaults(run_name: str) -> GRPOConfig:
    """0.1.x recipe defaults for a run named ``run_name`` (outputs under ``outputs/<run_name>``)."""
    return GRPOConfig(
        output_dir=f"outputs/{run_name}", run_name=run_name, learning_rate=1e-6, lr_scheduler_type="constant",
        warmup_steps=10, max_steps=500, bf16=True, max_grad_norm=0.01, num_iterations=1, max_seq_len=4096,
        per_device_train_batch_size=8, num_generations=8, gradient_accumulation_steps=4,
        gradient_checkpointing=True, save_strategy="steps", save_steps=500, save_only_model=True,
        logging_steps=1, log_on_each_node=False, log_completions=True,
    )


def lora_defaults(r: int = 8, alpha: int = 16) -> Any:
    """A peft ``LoraConfig`` as 0.1.x built it (attention and MLP projections, causal LM)."""
    from peft import LoraConfig

    return LoraConfig(
        r=r, lora_alpha=alpha, lora_dropout=0.0, task_type="CAUSAL_LM",
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    )


def get_model_and_tokenizer(model_name: str, use_liger: bool = True, model_kwargs: dict[str, Any] | None = None
                            ) -> tuple[Any, Any]:
    """``AutoModelForCausalLM`` + tokenizer from a local directory or a cached hub name.

    ``use_liger`` is accepted and ignored: Liger kernels only speed up GPU training and
    are not a dependency here; results are the same without them.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verifiers.models.offline import load_kwargs

    kwargs = {**load_kwargs(), **(model_kwargs or {})}
    try:
        model = AutoModelForCausalLM.from_pretrained(model_name, **kwargs)
        tokenizer = AutoTokenizer.from_pretrained(model_name)
    except OSError as exc:
        raise ConfigError(
            f"cannot load model {model_name!r}: {exc}. Give a local directory (save_pretrained / vf-tiny) "
            "or a model already in the Hugging Face cache when offline"
        ) from exc
    return model, tokenizer


def _refuse(name: str, value: Any, why: str) -> ConfigError:
    return ConfigError(f"GRPOConfig.{name}={value!r} is not supported here: {why}")


def to_train_config(args: GRPOConfig, *, model_dir: str, env_id: str, peft_config: Any = None) -> Any:
    """Map a 0.1.x `GRPOConfig` onto `trainers.grpo.config.TrainConfig`, refusing by name what we cannot honour."""
    from trainers.grpo.config import TrainConfig

    for name, value in args.non_default().items():
        if name in UNSUPPORTED:
            raise _refuse(name, value, UNSUPPORTED[name])
    if args.max_steps is None or args.max_steps <= 0:
        raise _refuse("max_steps", args.max_steps, "training by epochs is not supported; set max_steps")
    rows = args.per_device_train_batch_size * args.gradient_accumulation_steps
    if rows % args.num_generations:
        raise ConfigError(
            f"per_device_train_batch_size x gradient_accumulation_steps = {rows} must be divisible by "
            f"num_generations = {args.num_generations} (as in 0.1.x)"
        )
    scheduler = args.lr_scheduler_type or "constant"
    if scheduler not in ("constant", "linear", "cosine"):
        raise _refuse("lr_scheduler_type", scheduler, "use 'constant', 'linear' or 'cosine'")
    loss_type = {"grpo": "grpo", "bnpo": "bnpo", "dr_grpo": "dr_grpo", "dapo": "dapo"}.get(args.loss_type)
    if loss_type is None:
        raise _refuse("loss_type", args.loss_type, "use 'grpo', 'bnpo', 'dapo' or 'dr_grpo'")
    report = args.report_to or []
    report = [report] if isinstance(report, str) else list(report)
    report = [r for r in report if r != "none"]
    for r in report:
        if r not in ("wandb", "tensorboard"):
            raise _refuse("report_to", args.report_to, "use 'wandb', 'tensorboard' or 'none'")
    base_url = None
    if (args.vllm_server_host, args.vllm_server_port) != (DEFAULTS["vllm_server_host"], DEFAULTS["vllm_server_port"]):
        host = "127.0.0.1" if args.vllm_server_host == "0.0.0.0" else args.vllm_server_host
        base_url = f"http://{host}:{args.vllm_server_port}/v1"  # a vf-vllm / vLLM server the user started
    fields: dict[str, Any] = {
        "model": model_dir, "env_id": env_id, "output_dir": args.output_dir or "outputs/train/run",
        "seed": args.seed, "algorithm": "grpo",
        "algorithm_overrides": {
            "scale": "group" if args.scale_rewards else "none", "aggregation": loss_type,
            "eps_low": args.epsilon, "eps_high": args.epsilon_high if args.epsilon_high is not None else args.epsilon,
            "beta": args.beta, "mask_truncated_completions": args.mask_truncated_completions,
        },
        "prompts_per_step": rows // args.num_generations, "num_generations": args.num_generations,
        "gradient_accumulation_steps": args.gradient_accumulation_steps, "num_iterations": args.num_iterations,
        "max_steps": args.max_steps, "temperature": args.temperature, "top_p": args.top_p,
        "top_k": -1 if args.top_k is None else args.top_k,
        "max_seq_len": args.max_seq_len or 2048, "max_concurrent": args.max_concurrent,
        "num_batches_ahead": args.num_batches_ahead, "generation_timeout_s": args.async_generation_timeout,
        "base_url": base_url, "learning_rate": args.learning_rate, "lr_scheduler": scheduler,
        "warmup_steps": args.warmup_steps, "weight_decay": args.weight_decay, "max_grad_norm": args.max_grad_norm,
        "gradient_checkpointing": args.gradient_checkpointing, "mixed_precision": "bf16" if args.bf16 else "no",
        "save_every": args.save_steps if args.save_strategy == "steps" else 0,
        "log_every": max(1, args.logging_steps), "report_to": ["jsonl", *report],
        "adam_beta1": args.adam_beta1, "adam_beta2": args.adam_beta2,
    }
    if args.max_tokens is not None or args.max_completion_length is not None:
        fields["max_tokens"] = args.max_tokens or args.max_completion_length
    if args.max_prompt_length != DEFAULTS["max_prompt_length"]:  # 0.1.x truncated; ours drops longer prompts
        fields["max_prompt_len"] = args.max_prompt_length
    if args.save_strategy == "no":
        fields["save_every"] = 0
    elif args.save_strategy != "steps":
        raise _refuse("save_strategy", args.save_strategy, "use 'steps' or 'no'")
    if peft_config is not None:
        fields.update(lora=True, lora_r=peft_config.r, lora_alpha=peft_config.lora_alpha,
                      lora_dropout=peft_config.lora_dropout,
                      lora_target_modules=sorted(peft_config.target_modules or []) or ["q_proj", "v_proj"])
    known = set(TrainConfig.model_fields)
    return TrainConfig.model_validate({k: v for k, v in fields.items() if k in known})


class GRPOTrainer:
    """``vf.GRPOTrainer(model=..., env=..., args=..., processing_class=..., peft_config=...)`` on our trainer.

    The model (and tokenizer) are saved to ``<output_dir>/base_model`` so the trainer and its
    inference engine load the same weights; the environment object is handed over as is.
    """

    def __init__(self, model: Any, env: Any, args: GRPOConfig | None = None, processing_class: Any = None,
                 peft_config: Any = None, **kwargs: Any) -> None:
        if kwargs:
            raise ConfigError(f"GRPOTrainer got arguments this trainer does not take: {sorted(kwargs)}")
        args = args if args is not None else GRPOConfig()
        out = Path(args.output_dir or "outputs/train/run")
        if isinstance(model, (str, Path)):
            model_dir = str(model)
        else:
            if processing_class is None:
                raise ConfigError("GRPOTrainer needs processing_class (the tokenizer) when model is a model object")
            model_dir = str(out / "base_model")
            _save_base_model(out, model, processing_class, overwrite=bool(getattr(args, "overwrite_output_dir", False)))
        env_id = _register_env(env)
        self.config = to_train_config(args, model_dir=model_dir, env_id=env_id, peft_config=peft_config)
        from trainers.grpo.trainer import GRPOTrainer as _Trainer

        self.trainer = _Trainer(self.config)
        self.env = env

    def train(self, resume_from_checkpoint: str | bool | None = None) -> Any:
        return self.trainer.train(resume=resume_from_checkpoint or False)


def _save_base_model(out: Path, model: Any, tokenizer: Any, *, overwrite: bool) -> None:
    """Save the model object into ``out/base_model``, in a directory vf-train may write.

    The directory is checked and marked as vf-train's first (as vf-train does before it writes),
    so a model or an unrelated folder is never written into; an earlier run's directory that
    already holds the base model is left for ``train(resume_from_checkpoint=...)`` to decide.
    """
    from trainers.grpo.run.outdir import MARKER, check_output_dir, claim_output_dir, has_run

    if (out / MARKER).is_file() and has_run(out) and (out / "base_model" / "config.json").is_file() and not overwrite:
        return
    check_output_dir(out, resume=False, overwrite=overwrite)
    claim_output_dir(out, resume=False, overwrite=overwrite)
    model.save_pretrained(str(out / "base_model"))
    tokenizer.save_pretrained(str(out / "base_model"))


def _register_env(env: Any) -> str:
    """Make an environment object loadable by name (our trainer loads environments by id)."""
    name = f"_vf_compat_env_{id(env):x}"
    module = types.ModuleType(name)
    module.load_environment = lambda **_: env  # type: ignore[attr-defined]
    sys.modules[name] = module
    return name
