"""How many KV-cache tokens the engine may hold, and which waiting requests fit.

The engine's cache is dense: ``rows x columns`` where the column count is the longest row. So the
honest cost of a set of rows is ``len(rows) * max(worst-case row length)``, where a row's worst
case is its (padded) prompt plus its ``max_tokens``. Admitting against that product bounds the
real buffer bytes (`verifiers.inference.engine.kv.SlotKV` never allocates beyond it), unlike a sum of
per-row lengths, which only a paged cache could honour.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from verifiers.models.host import available_bytes

DEFAULT_PREFILL_TOKENS = 8192
# Share of the memory available at construction (GPU memory, or RAM on a CPU) the default KV budget may take.
DEFAULT_MEMORY_FRACTION = 0.5


def kv_bytes_per_token(model: Any) -> int:
    """Bytes one token's keys and values take over all layers (from the config; 0 if unknown)."""
    import torch

    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    layers = int(getattr(cfg, "num_hidden_layers", 0) or 0)
    heads = int(getattr(cfg, "num_attention_heads", 0) or 0)
    kv_heads = int(getattr(cfg, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(cfg, "head_dim", None) or (cfg.hidden_size // max(heads, 1)))
    dtype = next(model.parameters()).dtype
    return 2 * layers * kv_heads * head_dim * torch.empty((), dtype=dtype).element_size()


def default_kv_tokens(model: Any, device: Any, max_batch_size: int, max_model_len: int) -> int:
    """``max_batch_size * max_model_len`` (the worst case), capped by the memory there is.

    The cap is `DEFAULT_MEMORY_FRACTION` of the memory available when the engine is built (the GPU's
    free memory; on a CPU the machine's available RAM), divided by the bytes per KV token; it leaves
    room for a trainer sharing the device. Why on a CPU too: uncapped, 256 concurrent 1,024-token
    replies of a 135M-parameter model asked for 12 GB of cache and a 24 GB machine started swapping;
    capped, the requests beyond the budget wait their turn. Pass ``max_kv_tokens`` to choose exactly.
    """
    import torch

    tokens = max_batch_size * max_model_len
    free: int | None = None
    if getattr(device, "type", None) == "cuda" and torch.cuda.is_available():
        try:
            free, _ = torch.cuda.mem_get_info(device)
        except Exception:  # no real CUDA runtime behind this device
            return tokens
    elif getattr(device, "type", None) == "cpu":
        free = available_bytes()
    per = kv_bytes_per_token(model)
    if free is not None and per > 0:
        tokens = min(tokens, max(max_model_len, int(free * DEFAULT_MEMORY_FRACTION) // per))
    return tokens


@dataclass(slots=True)
class Budget:
    """Admission state: rows and dense width reserved by the admitted requests."""

    max_tokens: int
    max_rows: int

    def cost(self, rows: int, width: int) -> int:
        return rows * width

    def fits(self, rows: int, width: int, add_rows: int, add_width: int) -> bool:
        """Whether ``add_rows`` more rows of worst length ``add_width`` fit next to ``rows`` x ``width``."""
        total = rows + add_rows
        return total <= self.max_rows and total * max(width, add_width) <= self.max_tokens

    def never_fits(self, rows: int, width: int) -> bool:
        """A request that would not fit even in an empty engine."""
        return rows * width > self.max_tokens


def prefill_groups(prompts: list[tuple[int, int]], width_bound: int, max_rows: int) -> list[list[int]]:
    """Group prompt indices for left-padded prefill without raising the batch's dense width.

    ``prompts`` are ``(length, max_tokens)``. Longest first; a prompt joins the current group only
    if padding it to the group's longest keeps ``padded + max_tokens <= width_bound`` (the width
    admission reserved), so padding never costs memory the budget did not grant.
    """
    order = sorted(range(len(prompts)), key=lambda i: -prompts[i][0])
    groups: list[list[int]] = []
    longest = 0
    for i in order:
        length, max_new = prompts[i]
        if groups and len(groups[-1]) < max_rows and longest + max_new <= width_bound:
            groups[-1].append(i)
        else:
            groups.append([i])
            longest = length
    return groups
