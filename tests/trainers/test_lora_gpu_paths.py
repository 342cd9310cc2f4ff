"""LoRA on a shared engine: no samples from the base model mid-step, and merging without a model copy."""

from __future__ import annotations

import copy
import io
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch


def test_reference_pass_holds_an_engine_generating_ahead(train_config: Callable[..., Any], tmp_path: Path) -> None:
    """With LoRA the reference is the policy with its adapters off; an engine decoding ahead on the
    same model must wait, or it samples from the base model under the policy's version."""
    from rich.console import Console

    from trainers.grpo.trainer import GRPOTrainer
    from verifiers.inference.engine.sampling import SamplingParams

    cfg = train_config(tmp_path, lora=True, algorithm_overrides={"beta": 0.04}, num_batches_ahead=1)
    trainer = GRPOTrainer(cfg, console=Console(file=io.StringIO()))
    trainer.setup()
    engine = trainer.sync.engine
    done = threading.Event()
    try:
        with trainer._reference():
            worker = threading.Thread(target=lambda: (engine.generate_sync([5, 6, 7], SamplingParams(max_tokens=2)),
                                                      done.set()))
            worker.start()
            time.sleep(0.5)
            assert not done.is_set(), "the engine decoded while the adapters were off"
        worker.join(30)
        assert done.is_set()
    finally:
        trainer.sync.close()
        trainer.generator.close()


def test_merged_save_equals_merge_and_unload_and_leaves_the_adapter(base_model_dir: Path, tmp_path: Path) -> None:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from trainers.grpo.sync.base import save_merged

    base = AutoModelForCausalLM.from_pretrained(base_model_dir)
    lora = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():
        for n, p in lora.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5)  # B starts at zero: make the merge matter
    expected = copy.deepcopy(lora).merge_and_unload()
    save_merged(lora, None, tmp_path / "merged")
    saved = AutoModelForCausalLM.from_pretrained(tmp_path / "merged")
    ids = torch.tensor([[3, 9, 27, 4, 11]])
    with torch.no_grad():
        assert torch.allclose(saved(ids).logits, expected(ids).logits, atol=1e-5)
        assert not torch.allclose(saved(ids).logits, AutoModelForCausalLM.from_pretrained(base_model_dir)(ids).logits)
    assert not any(getattr(m, "merged", False) for m in lora.modules())
    assert any("lora_A" in n for n, _ in lora.named_parameters())
