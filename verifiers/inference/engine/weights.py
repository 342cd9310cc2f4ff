"""The all-or-nothing check before new weights are copied into the served model.

``load_state_dict`` copies the matching tensors before it complains about the rest; here every
name, shape and dtype kind is checked first, so a mismatched checkpoint changes nothing.
"""

from __future__ import annotations

from typing import Any

from verifiers.inference.engine.requests import WeightMismatchError


def match_state(own: Any, sd: Any, *, strict: bool) -> list[tuple[Any, Any]]:
    """``(served tensor, new tensor)`` pairs of ``own`` (the served state dict) and ``sd``.

    Raises `WeightMismatchError` listing every mismatch instead.
    """
    import torch

    problems: list[str] = []
    if not hasattr(sd, "items"):
        raise WeightMismatchError(f"expected a state dict or a model, got {type(sd).__name__}")
    missing = [k for k in own if k not in sd]
    unexpected = [k for k in sd if k not in own]
    if strict and missing:
        problems.append(f"missing tensors: {', '.join(missing[:8])}{' ...' if len(missing) > 8 else ''}")
    if strict and unexpected:
        problems.append(f"unexpected tensors: {', '.join(unexpected[:8])}{' ...' if len(unexpected) > 8 else ''}")
    pairs = []
    for name, src in sd.items():
        dst = own.get(name)
        if dst is None:
            continue
        if not isinstance(src, torch.Tensor):
            problems.append(f"{name}: not a tensor ({type(src).__name__})")
        elif tuple(src.shape) != tuple(dst.shape):
            problems.append(f"{name}: shape {tuple(src.shape)}, served model has {tuple(dst.shape)}")
        elif src.dtype.is_floating_point != dst.dtype.is_floating_point or src.dtype.is_complex != dst.dtype.is_complex:
            problems.append(f"{name}: dtype {src.dtype}, served model has {dst.dtype}")
        else:
            pairs.append((dst, src))
    if problems:
        shown = "; ".join(problems[:6]) + (f"; and {len(problems) - 6} more" if len(problems) > 6 else "")
        raise WeightMismatchError(f"the new weights do not match the served model, nothing was changed: {shown}")
    return pairs
