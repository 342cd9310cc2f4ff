"""Per-token log-probabilities of a training batch, computing each shared prompt once.

The ``G`` samples of a group share their prompt, which is often most of each sequence. A
plain forward pass recomputes that prompt ``G`` times; here the distinct prompts are run
once (left-padded, with a KV cache), the cache rows are expanded to the samples
(``index_select``, so gradients from every sample flow back into the one prompt pass), and
only the completions are run on top. The result is the same function of the weights as a
full forward pass, with up to ``G``x fewer prompt-token FLOPs in both forward and backward.
Rows whose prompt is not shared, and models with gradient checkpointing (which disables
the KV cache in training), take the plain path.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from trainers.grpo.batch import TrainBatch
from trainers.grpo.losses import entropy_from_logits


def _entropy(logits: Tensor, with_grad: bool) -> Tensor:
    if with_grad:
        return entropy_from_logits(logits)
    with torch.no_grad():
        return entropy_from_logits(logits.detach())


def _full(model: Any, batch: TrainBatch, temperature: float, entropy_grad: bool) -> tuple[Tensor, Tensor]:
    out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids,
                use_cache=False)
    logits = out.logits[:, :-1, :].float()
    if temperature != 1.0:
        logits = logits / temperature
    targets = batch.input_ids[:, 1:]
    logp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    return logp, _entropy(logits, entropy_grad)


def _prompt_groups(batch: TrainBatch) -> tuple[list[int], list[int]]:
    """Representative row of each distinct prompt, and each row's prompt index."""
    reps: list[int] = []
    row_to_prompt: list[int] = []
    seen: dict[tuple[int, int], list[int]] = {}
    ids = batch.input_ids
    for i, (g, p) in enumerate(zip(batch.group_ids.tolist(), batch.prompt_lens.tolist(), strict=True)):
        match = None
        for u in seen.get((g, p), []):
            if torch.equal(ids[i, :p], ids[reps[u], :p]):
                match = u
                break
        if match is None:
            match = len(reps)
            reps.append(i)
            seen.setdefault((g, p), []).append(match)
        row_to_prompt.append(match)
    return reps, row_to_prompt


def completion_logps(
    model: Any, batch: TrainBatch, temperature: float = 1.0, *, entropy_grad: bool = False, share_prompts: bool = True
) -> tuple[Tensor, Tensor]:
    """``(logp, entropy)``, each ``[N, L-1]`` over targets like ``batch.loss_mask``.

    Positions inside the prompt are 0 on the shared path (they are never in the loss).
    """
    flag = "is_activation_checkpointing" if hasattr(model, "is_activation_checkpointing") else "is_gradient_checkpointing"
    checkpointing = bool(getattr(model, flag, False)) and model.training
    if batch.prompt_lens is None or int(batch.prompt_lens.min()) < 1:
        return _full(model, batch, temperature, entropy_grad)
    reps, row_to_prompt = _prompt_groups(batch)
    if not share_prompts or checkpointing or len(reps) == len(batch):
        return _full(model, batch, temperature, entropy_grad)
    from verifiers.inference import kv

    device = batch.input_ids.device
    n, width = batch.input_ids.shape
    plens = batch.prompt_lens
    lens = batch.attention_mask.sum(1)
    # 1. each distinct prompt once, left-padded
    P = int(plens[reps].max())
    pid = torch.zeros((len(reps), P), dtype=torch.long, device=device)
    pmask = torch.zeros((len(reps), P), dtype=torch.long, device=device)
    for u, r in enumerate(reps):
        p = int(plens[r])
        pid[u, P - p :] = batch.input_ids[r, :p]
        pmask[u, P - p :] = 1
    ppos = (pmask.cumsum(1) - 1).clamp(min=0)
    out = model(input_ids=pid, attention_mask=pmask, position_ids=ppos, use_cache=True)
    idx = torch.tensor(row_to_prompt, dtype=torch.long, device=device)
    cache = out.past_key_values
    kv.select_rows(cache, idx)
    first_logits = out.logits[:, -1, :].index_select(0, idx)
    # 2. the completions (everything after the prompt, env tokens included) on top
    clens = lens - plens
    C = int(clens.max())
    cid = torch.zeros((n, C), dtype=torch.long, device=device)
    cmask = torch.zeros((n, C), dtype=torch.long, device=device)
    for i in range(n):
        p, c = int(plens[i]), int(clens[i])
        cid[i, :c] = batch.input_ids[i, p : p + c]
        cmask[i, :c] = 1
    cpos = plens.unsqueeze(1) + torch.arange(C, device=device).unsqueeze(0)
    out2 = model(input_ids=cid, attention_mask=torch.cat([pmask.index_select(0, idx), cmask], dim=1),
                 position_ids=cpos, past_key_values=cache, use_cache=True)
    # completion token j is predicted by the prompt's last position (j = 0) or completion j - 1
    pred = torch.cat([first_logits.unsqueeze(1), out2.logits[:, :-1, :]], dim=1).float()
    if temperature != 1.0:
        pred = pred / temperature
    lp = pred.gather(-1, cid.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(pred, dim=-1)
    ent = _entropy(pred, entropy_grad)
    # 3. back to target coordinates: completion token j of row i is target plens[i] - 1 + j
    j = torch.arange(C, device=device).unsqueeze(0)
    valid = j < clens.unsqueeze(1)
    dummy = width - 1  # one spare column absorbs the padding writes, then is cut off
    target = torch.where(valid, plens.unsqueeze(1) - 1 + j, torch.full_like(j.expand(n, C), dummy))
    zeros = torch.zeros((n, width), dtype=lp.dtype, device=device)
    logp = zeros.scatter(1, target, torch.where(valid, lp, torch.zeros_like(lp)))[:, : width - 1]
    entropy = zeros.scatter(1, target, torch.where(valid, ent, torch.zeros_like(ent)))[:, : width - 1]
    return logp, entropy
