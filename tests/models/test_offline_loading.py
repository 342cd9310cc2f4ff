"""Loading a model never reaches the Hugging Face Hub: Hub kernels stay off whatever is installed."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_models_load_with_hub_kernels_off(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from verifiers.inference.engine.loading import load_model_and_tokenizer
    from verifiers.models.offline import load_kwargs
    from verifiers.models.tiny import TinyModelSpec, save_tiny_model

    assert load_kwargs() == {"use_kernels": False}  # transformers 5.x (the tested set) knows Hub kernels
    model, _ = load_model_and_tokenizer(save_tiny_model(tmp_path / "m", TinyModelSpec(hidden_size=32)))
    assert model.use_kernels is False
    model.train()  # transformers 5.25 re-kernelizes on train() when kernels are on: it must not here
    assert model.use_kernels is False
