"""One-line answers to "why is this not on my GPU?", for `vf-serve` and `vf-train`.

Two situations cost new users hours: a CUDA GPU that torch can use while the run stays on
the CPU (`vf-serve` defaults to ``--device cpu``), and a GPU the machine has while the
installed torch is a CPU-only build (``+cpu`` wheels from PyTorch's CPU index), where
``--device cuda`` fails deep inside torch. torch is imported lazily, only when asked.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from verifiers.errors import ConfigError

INSTALL_DOC = "docs/install.md"
_NVIDIA_MARKERS = ("/proc/driver/nvidia/gpus", "/dev/nvidia0")


def nvidia_gpu_present() -> bool:
    """Whether the machine shows an NVIDIA GPU to this process, whatever torch was built for."""
    return any(Path(p).exists() for p in _NVIDIA_MARKERS)


def _torch_build() -> str:
    import torch

    return f"torch {torch.__version__}" + (" is a CPU-only build" if torch.version.cuda is None else "")


def check_device(device: str, option: str = "--device") -> None:
    """Raise `ConfigError` in one line when ``device`` names CUDA and torch cannot use it."""
    if not device.startswith("cuda"):
        return
    import torch

    if torch.cuda.is_available():
        count = torch.cuda.device_count()
        index = device.partition(":")[2]
        if index and (not index.isdigit() or int(index) >= count):
            raise ConfigError(f"{option} {device}: this machine has {count} CUDA device(s) (cuda:0..cuda:{count - 1})")
        return
    if torch.version.cuda is None:
        raise ConfigError(
            f"{option} {device}, but {_torch_build()}: install a CUDA build of torch (`pip install torch` from "
            f"PyPI, see {INSTALL_DOC}), or use {option} cpu"
        )
    raise ConfigError(
        f"{option} {device}, but torch {torch.__version__} sees no CUDA GPU (driver missing, or hidden by "
        f"CUDA_VISIBLE_DEVICES): check `nvidia-smi`, or use {option} cpu"
    )


def unused_gpu_note(device: str, fix: str) -> str | None:
    """A one-line note when this run uses the CPU although a GPU is there; None otherwise.

    ``fix`` says how to use the GPU in the caller's terms (e.g. "add --device cuda").
    """
    if not device.startswith("cpu"):
        return None
    import torch

    if torch.cuda.is_available():
        return f"note: a CUDA GPU ({torch.cuda.get_device_name(0)}) is available but unused: {fix}"
    if torch.version.cuda is None and nvidia_gpu_present():
        return (f"note: this machine has an NVIDIA GPU, but {_torch_build()}: to use the GPU install a CUDA build "
                f"(`pip install torch` from PyPI, see {INSTALL_DOC})")
    return None


def is_oom(exc: BaseException) -> bool:
    """An allocator failure: ``torch.OutOfMemoryError`` or a RuntimeError saying "out of memory"."""
    import torch

    return isinstance(exc, torch.OutOfMemoryError) or (isinstance(exc, RuntimeError) and "out of memory" in str(exc))


def empty_device_cache(device: Any) -> None:
    """Give freed blocks back after an OOM so the surviving rows can allocate again."""
    import torch

    if getattr(device, "type", None) == "cuda" and torch.cuda.is_available():
        with contextlib.suppress(Exception):
            torch.cuda.empty_cache()
