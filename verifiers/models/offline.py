"""What every ``from_pretrained`` of ours passes so that loading a model never reaches the Hub.

transformers 5.2x turns Hub kernels on by default whenever the ``kernels`` package is installed
(it comes with some of its extras): loading a model then downloads kernels from the Hugging Face
Hub for the model's layers, which fails on an offline machine, and on a CUDA device it probes
fails outright in a fake-GPU test. Models here are loaded offline by design, so kernels are off.
"""

from __future__ import annotations

from typing import Any


def load_kwargs() -> dict[str, Any]:
    """``use_kernels=False`` where this transformers knows Hub kernels (5.x), else nothing."""
    from transformers import PreTrainedModel

    return {"use_kernels": False} if hasattr(PreTrainedModel, "set_use_kernels") else {}
