"""The one training config: a pydantic model loaded from TOML, with ``--key value`` overrides.

Unknown keys are errors (a typo must not silently train with a default), and the resolved
config is written next to every run as ``config.json`` so a run can be reproduced or resumed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from trainers.grpo.ray.config import RayConfig
from verifiers.config import load_toml, merge, parse_overrides, validate
from verifiers.errors import ConfigError
from verifiers.models.tiny import ToolFormat

if TYPE_CHECKING:  # the presets import torch; the config is read without it
    from trainers.grpo.algo.algorithms import AlgorithmPreset


class TinyModelConfig(BaseModel):
    """Shape of the model built when ``model = "tiny"`` (see `vf-tiny`)."""

    model_config = ConfigDict(extra="forbid")
    arch: Literal["llama", "qwen2"] = "llama"
    hidden_size: int = 64
    intermediate_size: int = 192
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    tool_format: ToolFormat = Field(
        "json", description="how the chat template lists tools: JSON schemas or compact signatures (vf-tiny)")
    seed: int = 0


class ManagedVLLMConfig(BaseModel):
    """``[vllm]``: vf-train starts (and stops) its own vLLM servers on this machine, serving ``model``."""

    model_config = ConfigDict(extra="forbid")
    num_servers: int = Field(1, ge=1, description="servers started, each a full replica")
    kv_cache_gib: int | None = Field(None, ge=1, description="CPU only: KV cache GiB per server (default 2)")
    cpu_cores: list[str] | None = Field(None, description="CPU only: cores per server, e.g. ['0', '1']")
    extra_args: list[str] = Field(default_factory=list, description="passed to vLLM, e.g. ['--enforce-eager']")
    startup_timeout_s: float = Field(600.0, gt=0)


class TrainConfig(BaseModel):
    """Every knob of `vf-train`. See docs/training.md for what each one does."""

    # allow_inf_nan=False: `learning_rate = inf` (or a NaN anywhere) is refused here, not trained into NaN weights
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    # what to train, on what
    model: str = Field("tiny", description="a save_pretrained directory, a .gguf file (converted once), a registry "
                       "name (vf-model list), a Hugging Face model id (fetched into its cache), or 'tiny' to build one "
                       "(tiny_model)")
    tiny_model: TinyModelConfig = Field(default_factory=TinyModelConfig)
    chat_template: str | None = Field(
        None, description="chat template for every prompt the run renders (the learner's, the embedded engine's, "
        "vLLM's): a file, Jinja text or a shipped name (chatml-tools); default: the model's own, or a registry "
        "model's shipped tool template (vf-model list)")
    tool_call_parser: str = Field(
        "hermes", description="how tool calls are read from sampled text, by vLLM's name (supported: hermes)")
    env_id: str = "reverse-text"
    env_args: dict[str, Any] = Field(default_factory=dict)
    output_dir: str = "outputs/train/run"
    overwrite_output_dir: bool = Field(False, description="write into a non-empty output_dir: an earlier run's files "
                                       "are replaced (vf-train --overwrite); never a model directory")
    seed: int = 0

    # algorithm (a named preset plus field overrides, e.g. {beta = 0.01})
    algorithm: str = "grpo"
    algorithm_overrides: dict[str, Any] = Field(default_factory=dict)
    expert_data: str | None = Field(
        None, description="jsonl of chat rows ('messages', optional 'tools' schemas) for the 'mix' algorithm "
        "and the SFT warm-up")
    sft_warmup_steps: int = Field(
        0, ge=0, description="SFT steps on expert_data before the first RL step, without rollouts (0: none)")
    sft_warmup_tokens: Literal["content", "all"] = Field(
        "content", description="what the warm-up trains: each assistant message's content (text and tool-call "
        "argument values) or every assistant token")
    sft_warmup_all_steps: int = Field(
        0, ge=0, description="then this many SFT steps on every assistant token of expert_data (the markup too), "
        "before the first RL step: the copies first, then the markup (docs/training.md)")
    sft_warmup_all_data: str | None = Field(
        None, description="jsonl of chat rows for the sft_warmup_all_steps phase instead of expert_data: e.g. "
        "copies learned from clean episodes, then the markup and style of another expert's (unused when "
        "sft_warmup_all_steps is 0)")
    save_warmup_model: bool = Field(
        False, description="save the model as the SFT warm-up left it in output_dir/warmup_model (to measure what "
        "RL added on top)")
    sft_warmup_batch_size: int = Field(32, ge=1, description="expert rows per warm-up step")
    sft_warmup_learning_rate: float | None = Field(None, gt=0, description="warm-up learning rate (default: learning_rate)")

    # batch shape
    prompts_per_step: int = Field(8, ge=1, description="unique prompts per optimizer step")
    num_generations: int = Field(8, ge=1, description="samples per prompt (the group size G)")
    gradient_accumulation_steps: int = Field(1, ge=1, description="micro-batches per optimizer step")
    micro_batch_tokens: int | None = Field(
        None, ge=2, description="micro-batches of at most this many padded tokens (rows x longest row), rows of "
        "similar length and whole prompt groups together; replaces gradient_accumulation_steps (None: equal splits)")
    logprob_chunk_tokens: int | None = Field(
        1024, ge=1, description="learner positions whose logits exist at once (memory ≈ this x vocab x 4 bytes); "
        "None = the whole micro-batch's logits at once (≈ 4 float32 copies)")
    num_iterations: int = Field(1, ge=1, description="optimizer passes over each generated batch")
    skip_zero_advantage: bool = Field(
        True, description="leave out of the forward/backward the RL rows whose advantage is 0 at every token, when "
        "they cannot change the gradient (beta 0, no entropy bonus, one process); the update is the same")
    max_steps: int = Field(100, ge=1)

    # generation
    max_tokens: int = Field(32, ge=1, description="per model turn")
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = -1
    min_p: float = Field(0.0, ge=0, lt=1, description="sent as extra_body.min_p when > 0: tokens below min_p x the "
                         "likeliest token's probability are never sampled")
    max_prompt_len: int | None = Field(None, ge=1, description="drop training prompts longer than this")
    max_seq_len: int = Field(2048, ge=2, description="prompt + completion tokens trained on per rollout")
    overlong: Literal["truncate", "drop"] = "truncate"
    max_concurrent: int = Field(256, ge=1)
    rollout_timeout_s: float | None = None
    num_batches_ahead: int = Field(0, ge=0, description="0 = synchronous; k = generate k batches ahead")
    generation_timeout_s: float = Field(600.0, gt=0)
    max_staleness: int | None = Field(None, ge=0, description="drop batches from policies older than this")
    max_refills: int = Field(4, ge=0, description="extra generations per step to replace filtered groups")

    # inference server
    base_url: str | list[str] | None = Field(
        None, description="external OpenAI-compatible server(s); several = vLLM replicas; default: embedded")
    vllm: ManagedVLLMConfig | None = Field(None, description="start vLLM servers for this run (instead of base_url)")
    ray: RayConfig | None = Field(None, description="rollout workers and the experience store on Ray")
    server_type: Literal["auto", "vllm", "vf-serve"] = Field("auto", description="auto: ask the server")
    weight_sync: Literal["auto", "reload", "nccl", "lora"] = Field(
        "auto", description="vLLM: nccl (GPU trainer, remote servers) or reload (same machine); lora = adapter only")
    sync_dir: str | None = Field(None, description="reload: checkpoint directory the servers read (default /dev/shm)")
    sync_verify: bool = Field(True, description="compare served and trained logprobs on a probe after every sync")
    sync_verify_tol: float | None = Field(None, gt=0, description="default 1e-3 (float32), 0.1 (16-bit)")
    nccl_port: int = Field(0, ge=0, description="nccl: rendezvous port on the trainer (0 = a free one)")
    nccl_address: str | None = Field(None, description="nccl: this host's address the servers reach (default: routed)")
    server_model_name: str = "policy"
    engine_max_batch_size: int = Field(256, ge=1)
    engine_max_kv_tokens: int | None = Field(
        None, ge=1, description="embedded engine: KV-cache budget in tokens (rows x longest prompt + max_tokens); "
                                "default max_batch_size x max_model_len, on a GPU at most half its free memory")

    # optimisation
    learning_rate: float = Field(1e-5, gt=0)
    lr_scheduler: Literal["constant", "linear", "cosine"] = "constant"
    warmup_steps: int = Field(0, ge=0)
    weight_decay: float = Field(0.0, ge=0)
    adam_beta1: float = 0.9
    adam_beta2: float = 0.99
    max_grad_norm: float | None = Field(1.0, gt=0)
    gradient_checkpointing: bool = False
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = Field(
        "float32", description="weights and optimizer state; float32 = master weights (auto: the checkpoint's)")
    mixed_precision: Literal["no", "bf16"] = Field(
        "no", description="bf16: learner and reference forward passes under bf16 autocast (the embedded engine samples in dtype)")
    lora: bool = False
    lora_r: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.0
    lora_target_modules: list[str] = Field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    lora_modules_to_save: list[str] = Field(
        default_factory=list, description="modules trained in full beside the adapters (peft modules_to_save)")
    torch_threads: int | None = Field(None, ge=1)
    retain_freed_memory: bool = Field(
        True, description="keep freed tensor memory in the process (glibc mallopt): no page faults on reuse")

    # evaluation, checkpoints, logging
    eval_every: int = Field(0, ge=0, description="0 = never")
    eval_num_examples: int = 32
    save_every: int = Field(0, ge=0, description="0 = only at the end and on Ctrl-C")
    keep_checkpoints: int = Field(2, ge=1)
    log_every: int = Field(1, ge=1)
    report_to: list[Literal["jsonl", "tensorboard", "wandb"]] = Field(
        default_factory=lambda: ["jsonl"], description="'tensorboard', 'jsonl,wandb' or a list; jsonl is always written")
    num_sample_completions: int = Field(4, ge=0, description="rows of the sample-completions table printed at the end")
    plot: bool = True
    progress: bool = True
    log_lines_every: int = Field(10, ge=1, description="steps between plain log lines when stdout is not a terminal")
    log_lines_every_s: float = Field(30.0, gt=0, description="...or seconds, whichever comes first")
    reward_error_stop_share: float | None = Field(
        1.0, gt=0, le=1, description="stop when one reward function fails on at least this share of a "
                                     "step's rollouts (None: never stop; failures are logged either way)")
    degenerate_warn_steps: int = Field(
        10, ge=0, description="warn after this many steps in a row that cannot change the policy (0: never)")
    collapse_warn_steps: int = Field(
        20, ge=0, description="warn once when every group's rewards have been equal this many steps in a row "
                              "(a collapsed policy: lower learning_rate, raise temperature or num_generations; 0: never)")

    @model_validator(mode="after")
    def _consistent(self) -> TrainConfig:
        rows = self.prompts_per_step * self.num_generations
        if rows % self.gradient_accumulation_steps:
            raise ValueError(
                f"prompts_per_step x num_generations = {rows} rows must split evenly into "
                f"gradient_accumulation_steps={self.gradient_accumulation_steps} micro-batches"
            )
        return self

    @model_validator(mode="after")
    def _warmup(self) -> TrainConfig:
        if (self.sft_warmup_steps or self.sft_warmup_all_steps) and not self.expert_data:
            raise ValueError("sft_warmup_steps needs expert_data (a jsonl of correct chat episodes to train on)")
        if self.sft_warmup_all_steps and self.sft_warmup_steps and self.sft_warmup_tokens == "all":
            raise ValueError("sft_warmup_all_steps follows a content warm-up: with sft_warmup_tokens = 'all' "
                             "add its steps to sft_warmup_steps instead")
        return self

    @model_validator(mode="after")
    def _precision(self) -> TrainConfig:
        if self.mixed_precision == "bf16" and self.dtype != "float32":
            raise ValueError(
                f"mixed_precision = 'bf16' autocasts float32 master weights; with dtype = {self.dtype!r} the "
                "weights themselves are 16-bit and small updates round away: set dtype = 'float32'"
            )
        return self

    @field_validator("report_to", mode="before")
    @classmethod
    def _split_reporters(cls, v: Any) -> Any:
        if isinstance(v, str):  # --report_to tensorboard, report_to = "jsonl,wandb"
            return [r.strip() for r in v.split(",") if r.strip()]
        return v

    @field_validator("tool_call_parser")
    @classmethod
    def _known_parser(cls, v: str) -> str:
        from verifiers.models.chat_templates import TOOL_CALL_PARSERS

        if v not in TOOL_CALL_PARSERS:
            raise ValueError(f"tool_call_parser {v!r} is not supported; supported: {', '.join(TOOL_CALL_PARSERS)}")
        return v

    @field_validator("base_url", mode="before")
    @classmethod
    def _split_urls(cls, v: Any) -> Any:
        if isinstance(v, str) and "," in v:  # --base_url http://a/v1,http://b/v1
            return [u.strip() for u in v.split(",") if u.strip()]
        return v

    @model_validator(mode="after")
    def _servers(self) -> TrainConfig:
        if self.vllm is not None and self.base_url is not None:
            raise ValueError("set either base_url (servers you started) or [vllm] (vf-train starts them), not both")
        if isinstance(self.base_url, list) and not self.base_url:
            raise ValueError("base_url is an empty list: give one URL or more, or leave it out for the embedded engine")
        if self.weight_sync != "auto" and self.base_url is None and self.vllm is None:
            raise ValueError(f"weight_sync = {self.weight_sync!r} is for vLLM servers: set base_url or [vllm]")
        return self

    @property
    def base_urls(self) -> list[str]:
        if self.base_url is None:
            return []
        return [self.base_url] if isinstance(self.base_url, str) else list(self.base_url)

    @property
    def rows_per_step(self) -> int:
        return self.prompts_per_step * self.num_generations

    def sampling_args(self) -> dict[str, Any]:
        """What every training request asks the server for: the sampling settings, logprobs and token ids."""
        sampling: dict[str, Any] = {"max_tokens": self.max_tokens, "temperature": self.temperature, "top_p": self.top_p,
                                    "logprobs": True, "extra_body": {"return_token_ids": True}}
        if self.top_k > 0:
            sampling["extra_body"]["top_k"] = self.top_k
        if self.min_p > 0:
            sampling["extra_body"]["min_p"] = self.min_p
        return sampling

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.model_dump(mode="json"), indent=2) + "\n")


def validate_run(cfg: TrainConfig, preset: AlgorithmPreset) -> None:
    """Refuse an algorithm preset that cannot work with this config (checked before anything loads)."""
    # torch comes with the advantage table: imported here, so reading a config does not load it
    from trainers.grpo.algo.advantages import ADVANTAGES

    if preset.off_policy is not None and cfg.temperature != 1.0:
        raise ConfigError(
            "off-policy correction compares the sampler's logprobs, which are the raw (temperature 1) "
            f"log-softmax, with the learner's at temperature={cfg.temperature}; use temperature = 1.0 "
            "with off_policy, or disable off_policy"
        )
    if cfg.num_generations < 2 and preset.advantage in ADVANTAGES:
        raise ConfigError(
            f"num_generations = {cfg.num_generations}: the '{preset.advantage}' advantage compares each sample with "
            "the others of its group, so a group of one always has advantage 0 and the policy never changes; "
            "use num_generations >= 2"
        )
    if preset.mix is not None and not cfg.expert_data:
        raise ConfigError("the 'mix' algorithm needs expert_data = 'path/to/expert.jsonl' (rows with 'messages')")


def validate_processes(cfg: TrainConfig, world_size: int) -> None:
    """Refuse what several training processes (``accelerate launch``) cannot do.

    Against vLLM (``base_url`` / ``[vllm]``) rank 0 is the one writer of the weights, merged or the
    LoRA adapter alone (`trainers.grpo.sync.ranked`), so every sync transport works; what remains
    is the split of each step's prompts into whole groups per rank.
    """
    if cfg.prompts_per_step % world_size:
        raise ConfigError(
            f"prompts_per_step={cfg.prompts_per_step} is the global number of prompts per step and must be "
            f"divisible by the number of processes ({world_size}): each trains whole groups"
        )


def load_config(path: str | Path | None = None, overrides: list[str] | dict[str, Any] | None = None) -> TrainConfig:
    """TOML file (optional) + overrides → validated `TrainConfig`; errors name the key and the fix."""
    data: dict[str, Any] = {}
    if path is not None:
        data = load_toml(path, missing="config file {path} does not exist (examples: examples/configs/*.toml)")
    if overrides:
        data = merge(data, overrides if isinstance(overrides, dict) else parse_overrides(overrides))
    for key in ("expert_data", "sft_warmup_all_data"):
        if path is not None and isinstance(data.get(key), str):
            data[key] = resolve_data_path(data[key], Path(path), key)
    return validate(TrainConfig, data, "training config", docs="docs/training.md")


def resolve_data_path(value: str, config: Path, key: str) -> str:
    """A relative path from a config: from the working directory (as always), else from the config
    file's folder or one above it (``examples/configs/x.toml`` names ``examples/data/...``, relative
    to the checkout), so a run started elsewhere still finds it; if none has it, say where we looked."""
    given = Path(value).expanduser()
    if given.is_absolute() or given.exists():
        return value
    tried = [Path.cwd() / given]
    for folder in [config.resolve().parent, *config.resolve().parent.parents]:
        candidate = folder / given
        if candidate.exists():
            return str(candidate)
        tried.append(candidate)
    raise ConfigError(f"{key} {value!r} does not exist: looked in {tried[0]} (the working directory) and next to "
                      f"the config {config} and above it ({tried[1]} ... {tried[-1]}); give an absolute path")
