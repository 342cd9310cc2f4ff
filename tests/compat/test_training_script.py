"""A 0.1.x training script runs on our trainer (CPU, embedded engine), and the config
mapping refuses what it cannot honour, by name."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import verifiers as vf

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import sys
    import verifiers as vf
    assert "torch" not in sys.modules  # the training names load lazily

    model_dir, out_dir = sys.argv[1], sys.argv[2]
    model, tokenizer = vf.get_model_and_tokenizer(model_dir, use_liger=False, model_kwargs={})
    env = vf.load_environment("letter-repeat")
    args = vf.grpo_defaults(run_name="letter-repeat-test")
    args.output_dir = out_dir
    args.max_steps = 2
    args.per_device_train_batch_size = 8
    args.num_generations = 4
    args.gradient_accumulation_steps = 1
    args.max_tokens = 4
    args.max_seq_len = 64
    args.learning_rate = 1e-3
    args.bf16 = False
    args.gradient_checkpointing = False
    args.num_batches_ahead = 0
    args.save_strategy = "no"
    args.report_to = "none"
    trainer = vf.GRPOTrainer(model=model, env=env, args=args, processing_class=tokenizer,
                             peft_config=vf.lora_defaults(r=4, alpha=8))
    trainer.train()
    """
)


def test_0_1_x_training_script_runs_on_cpu(tmp_path: Path) -> None:
    from verifiers.models.tiny import TinyModelSpec, save_tiny_model

    model_dir = tmp_path / "tiny"
    save_tiny_model(model_dir, TinyModelSpec())  # what `vf-tiny DIR` writes
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    out = tmp_path / "run"
    env = {"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    res = subprocess.run([sys.executable, str(script), str(model_dir), str(out)], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-4000:]
    config = json.loads((out / "config.json").read_text())
    assert config["prompts_per_step"] == 2 and config["num_generations"] == 4 and config["max_steps"] == 2
    assert config["lora"] is True and config["lora_r"] == 4 and config["lora_alpha"] == 8
    assert config["algorithm_overrides"]["aggregation"] == "dr_grpo"  # 0.1.x default loss_type
    assert config["algorithm_overrides"]["scale"] == "none" and config["algorithm_overrides"]["beta"] == 0.001
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert len([s for s in steps if "reward" in s]) >= 2
    assert (out / "base_model" / "config.json").is_file()


def test_config_mapping_refuses_unsupported_fields_by_name() -> None:
    from verifiers.compat.training import to_train_config

    base = {"max_steps": 3, "per_device_train_batch_size": 8, "num_generations": 4}
    cfg = to_train_config(vf.GRPOConfig(**base, vllm_server_port=8123, scale_rewards=True, loss_type="grpo"),
                          model_dir="m", env_id="letter-repeat")
    assert cfg.base_url == "http://127.0.0.1:8123/v1"  # 0.1.x asked for a vLLM server: our vLLM backend
    assert cfg.algorithm_overrides["scale"] == "group" and cfg.prompts_per_step == 2
    for field, value in [("rollout_filter_ratio", 0.5), ("repetition_penalty", 1.1), ("delta", 2.0)]:
        with pytest.raises(vf.ConfigError, match=f"GRPOConfig.{field}="):
            to_train_config(vf.GRPOConfig(**base, **{field: value}), model_dir="m", env_id="e")
    with pytest.raises(vf.ConfigError, match="max_steps"):
        to_train_config(vf.GRPOConfig(), model_dir="m", env_id="e")
    with pytest.raises(vf.ConfigError, match="divisible by num_generations"):
        to_train_config(vf.GRPOConfig(max_steps=1, per_device_train_batch_size=6, num_generations=4),
                        model_dir="m", env_id="e")
    with pytest.raises(TypeError, match="not_a_field"):
        vf.GRPOConfig(not_a_field=1)


def test_import_verifiers_does_not_import_torch() -> None:
    code = "import sys, verifiers as vf; vf.GRPOConfig; print('torch' in sys.modules)"
    res = subprocess.run([sys.executable, "-c", code], env={"PYTHONPATH": str(ROOT)}, capture_output=True, text=True)
    assert res.stdout.strip() == "False", res.stderr
