"""Checking that a server serves the policy the trainer holds, by the logprobs of a fixed probe.

After every weight sync the trainer asks each server for its logprob of every token of a fixed
token sequence (``prompt_logprobs``) and compares them with its own forward pass over the same
tokens. A stale, partial or mis-named weight load, a wrong dtype or a LoRA adapter that was not
applied shows up as a difference far above the tolerance; agreeing kernels differ only by float
rounding. The tolerance (see `default_tolerance`) is stated per dtype: in float32 two correct
implementations agree to about 1e-5 on these logprobs (measured against vLLM's CPU build, see
docs/scaling.md), so 1e-3 leaves room for longer models and still catches a single optimizer step
of the Quickstart (which moves the probe by about 1e-1). bfloat16 keeps 8 mantissa bits, so
correct kernels already differ by about 1e-2 there; 0.1 is the bound, and it is no longer able to
see a small step, which the docs say plainly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

PROBE_MESSAGES = [
    {"role": "system", "content": "You are a careful assistant."},
    {"role": "user", "content": "Repeat the word 'probe', then count from 1 to 5."},
]
PROBE_REPLY = "probe 1 2 3 4 5"


def probe_token_ids(tokenizer: Any, max_len: int = 96) -> list[int]:
    """A fixed chat prompt plus a reply, as token ids (no model-specific choices)."""
    try:
        ids = tokenizer.apply_chat_template(PROBE_MESSAGES, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
        ids = list(ids)
    except Exception:  # a tokenizer without a chat template
        ids = list(tokenizer.encode(PROBE_MESSAGES[1]["content"]))
    ids += list(tokenizer.encode(PROBE_REPLY, add_special_tokens=False))
    return [int(t) for t in ids[-max_len:]]


def trainer_logprobs(model: Any, token_ids: list[int]) -> list[float]:
    """The trainer's logprob of each token given the ones before it (``len - 1`` values)."""
    device = next(model.parameters()).device
    ids = torch.tensor([token_ids], dtype=torch.long, device=device)
    with torch.no_grad():
        logits = model(input_ids=ids, use_cache=False).logits[0, :-1].float()
        logp = torch.log_softmax(logits, dim=-1).gather(-1, ids[0, 1:].unsqueeze(-1)).squeeze(-1)
    return [float(x) for x in logp.cpu()]


def default_tolerance(dtype: Any) -> float:
    name = str(dtype).replace("torch.", "")
    return 1e-3 if name in ("float32", "float64") else 0.1


@dataclass
class ProbeCheck:
    """One server's probe against the trainer's."""

    server: str
    max_abs_diff: float
    position: int
    served: float
    trained: float

    def ok(self, tol: float) -> bool:
        return self.max_abs_diff <= tol


def compare(server: str, served: list[float], trained: list[float]) -> ProbeCheck:
    if len(served) != len(trained):
        return ProbeCheck(server, float("inf"), -1, float("nan"), float("nan"))
    diffs = [abs(a - b) for a, b in zip(served, trained, strict=True)]
    pos = max(range(len(diffs)), key=diffs.__getitem__)
    return ProbeCheck(server, diffs[pos], pos, served[pos], trained[pos])


def max_change(before: list[float] | None, after: list[float]) -> float:
    """How far the policy moved on the probe since the last sync (0 when there is no previous one)."""
    if not before or len(before) != len(after):
        return 0.0
    return max(abs(a - b) for a, b in zip(before, after, strict=True))
