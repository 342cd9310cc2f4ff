"""LoRA with modules trained in full beside the adapters (``lora_modules_to_save``).

The trained copy must be what every consumer sees: the learner, the embedded engine's samples,
the merged ``final_model/`` and the weights pushed to a server; and the KL reference (adapters
off) must be the base model. A tied embedding must stay tied to the output layer. Before
``weight_export`` knew peft's wrapper, ``final_model/`` held ``*.original_module.*`` and
``*.modules_to_save.default.*`` names that no loader reads.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from trainers.grpo.config import TrainConfig
from verifiers.errors import ConfigError

pytest.importorskip("peft")
IDS = torch.tensor([[3, 9, 27, 4, 11]])


def test_merged_save_carries_the_trained_embedding_tied(train_config: Callable[..., TrainConfig],
                                                        base_model_dir: Path, tmp_path: Path) -> None:
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    from trainers.grpo.learn.lora import lora_config
    from trainers.grpo.sync.base import save_merged

    cfg = train_config(tmp_path, lora=True, lora_modules_to_save=["embed_tokens", "model.norm"])
    base = AutoModelForCausalLM.from_pretrained(base_model_dir)
    assert base.config.tie_word_embeddings
    model = get_peft_model(base, lora_config(cfg, base))
    with torch.no_grad():
        for n, p in model.named_parameters():
            if ".modules_to_save." in n:
                p.add_(torch.randn_like(p) * 0.5)
    save_merged(model, None, tmp_path / "merged")
    saved = AutoModelForCausalLM.from_pretrained(tmp_path / "merged")
    with torch.no_grad():
        assert torch.allclose(saved(IDS).logits, model(IDS).logits, atol=1e-5)
        with model.disable_adapter():
            base_logits = model(IDS).logits
        assert not torch.allclose(saved(IDS).logits, base_logits, atol=1e-3)
    assert saved.get_output_embeddings().weight.data_ptr() == saved.get_input_embeddings().weight.data_ptr()


def test_lora_steps_train_the_embedding_and_the_engine_serves_it(
    train_config: Callable[..., TrainConfig], tmp_path: Path
) -> None:
    from rich.console import Console

    from trainers.grpo.trainer import GRPOTrainer
    from verifiers.inference.engine.sampling import SamplingParams

    cfg = train_config(tmp_path / "run", max_steps=2, lora=True, lora_modules_to_save=["embed_tokens"],
                       algorithm_overrides={"beta": 0.04})
    trainer = GRPOTrainer(cfg, console=Console(file=io.StringIO()))
    trainer.train()
    model = trainer.sync.engine.model
    copies = [p for n, p in model.named_parameters() if ".modules_to_save." in n]
    assert len(copies) == 1 and copies[0].requires_grad and any(p is copies[0] for p in trainer.params)
    inp, out = model.get_input_embeddings(), model.get_output_embeddings()
    assert inp.modules_to_save["default"].weight is out.modules_to_save["default"].weight  # still tied
    assert not torch.equal(copies[0], inp.original_module.weight)  # it was trained

    prompt = IDS[0].tolist()
    trainer.sync.engine.start()
    try:
        got = trainer.sync.engine.generate_sync(prompt, SamplingParams(max_tokens=1, logprobs=True, seed=3))
    finally:
        trainer.sync.engine.stop()
    token, served = got.outputs[0].token_ids[0], got.outputs[0].logprobs[0]
    with torch.no_grad():
        adapted = float(torch.log_softmax(model(input_ids=IDS).logits[0, -1], -1)[token])
        with model.disable_adapter():
            reference = float(torch.log_softmax(model(input_ids=IDS).logits[0, -1], -1)[token])
    assert served == pytest.approx(adapted, abs=1e-5)
    assert abs(adapted - reference) > 1e-4  # the reference is the base model, not the policy


@pytest.mark.parametrize("overrides,needle", [
    ({"lora_modules_to_save": ["embeddings"]}, "lora_modules_to_save names ['embeddings']"),
    ({"lora_target_modules": ["qkv_proj"]}, "lora_target_modules names ['qkv_proj']"),
    ({"lora_modules_to_save": ["q_proj"]}, "in both lora_target_modules and lora_modules_to_save"),
    ({"lora_modules_to_save": ["embed_tokens"], "weight_sync": "lora", "base_url": "http://127.0.0.1:9/v1"},
     "use weight_sync = 'reload' or 'nccl'"),
], ids=["unknown-saved", "unknown-target", "both", "adapter-only-sync"])
def test_lora_module_mistakes_are_named(train_config: Callable[..., TrainConfig], base_model_dir: Path,
                                        tmp_path: Path, overrides: dict[str, Any], needle: str) -> None:
    from transformers import AutoModelForCausalLM

    from trainers.grpo.learn.lora import lora_config

    cfg = train_config(tmp_path, lora=True, **overrides)
    with pytest.raises(ConfigError) as err:
        lora_config(cfg, AutoModelForCausalLM.from_pretrained(base_model_dir))
    assert needle in str(err.value)
