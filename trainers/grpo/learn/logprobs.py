"""Per-token log-probabilities of a training batch, in bounded memory, computing each shared prompt once.

Memory. The LM head's output is the learner's largest tensor by far: ``[rows, tokens, vocab]``,
about 0.6 MB per token in float32 at a 152k vocabulary, and a plain ``log_softmax`` over it
keeps several copies alive (≈ 2.4 MB per token, 160 GB for 64 rows x 1k tokens). Here the
model is run with ``logits_to_keep=1`` (its head sees one position per row) while a forward
hook takes the decoder's final hidden states; the head and the log-softmax are then applied
to the positions that are trained on (``loss_mask``) only, ``chunk_tokens`` positions at a
time (`_HeadLogp`). Backward recomputes each chunk's logits from its hidden states instead of
keeping them, and turns them into their own gradient in place, so at most one chunk of logits
(plus small row blocks) is alive at any moment, forward or backward, whatever the batch size.

Shared prompts. The ``G`` samples of a group share their prompt, which is often most of each
sequence. A plain forward pass recomputes that prompt ``G`` times; here the distinct prompts
are run once (left-padded, with a KV cache, only the last position's hidden state is used),
the cache rows are expanded to the samples (``index_select``, so gradients from every sample
flow back into the one prompt pass), and only the completions are run on top. The result is
the same function of the weights as a full forward pass, with up to ``G``x fewer prompt-token
FLOPs in both forward and backward. Rows whose prompt is not shared, and models with gradient
checkpointing (which disables the KV cache in training), take the plain path.

Works through DDP/accelerate wrappers, PEFT (LoRA, also on the head) and tied embeddings:
the model's own ``forward`` runs (a bare float32 Llama-family model on a CPU runs the same
function as plain ops, `plain_forward`), and the head is the model's ``get_output_embeddings()``
module. A model that transforms logits after its head (soft-capping, a logit scale) is caught
by a one-time check and falls back to the full-logits path (`full_logits_logps`), as does
``chunk_tokens=None``.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import threading
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from trainers.grpo.algo.losses import entropy_from_logits
from trainers.grpo.data.batch import TrainBatch
from trainers.grpo.learn import plain_forward

log = logging.getLogger(__name__)

DEFAULT_CHUNK_TOKENS = 1024
"""Positions whose logits exist at once: 1024 x 152k vocab x 4 bytes = 0.6 GB in float32."""
ROW_BLOCKS = 16
"""A chunk's float32 temporaries are made a 1/16 of it at a time (bounds the peak at ≈ 1.1 chunks)."""
_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier_scale")
_HEAD_IS_PLAIN: weakref.WeakKeyDictionary[nn.Module, bool] = weakref.WeakKeyDictionary()


# ----------------------------------------------------------------------------- the full-logits path
def _entropy(logits: Tensor, with_grad: bool) -> Tensor:
    if with_grad:
        return entropy_from_logits(logits)
    with torch.no_grad():
        return entropy_from_logits(logits.detach())


def full_logits_logps(
    model: Any, batch: TrainBatch, temperature: float = 1.0, *, entropy_grad: bool = False, with_entropy: bool = True
) -> tuple[Tensor, Tensor | None]:
    """``(logp, entropy)`` at every target from the whole ``[N, L, V]`` logits tensor.

    The reference the chunked path is tested against, and the fallback for heads it cannot
    reproduce; it needs ≈ 4 float32 copies of the logits, so only fits small batches.
    """
    out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids,
                use_cache=False)
    logits = out.logits[:, :-1, :].float()
    if temperature != 1.0:
        logits = logits / temperature
    targets = batch.input_ids[:, 1:]
    logp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    entropy = _entropy(logits, entropy_grad) if with_entropy or entropy_grad else None
    return logp, entropy


# ----------------------------------------------------------------------------- model plumbing
def _causal_lm(model: nn.Module) -> nn.Module:
    """The transformers model inside DDP/accelerate (``.module``), PEFT and ``torch.compile`` wrappers."""
    m = model
    for _ in range(8):
        if isinstance(getattr(m, "module", None), nn.Module):
            m = m.module
        elif callable(getattr(m, "get_base_model", None)):
            m = m.get_base_model()
        elif isinstance(getattr(m, "_orig_mod", None), nn.Module):
            m = m._orig_mod
        else:
            break
    return m


def _keeps_logits(lm: nn.Module) -> bool:
    """Whether the model's forward takes ``logits_to_keep`` (every current transformers LM does)."""
    try:
        return "logits_to_keep" in inspect.signature(lm.forward).parameters
    except (TypeError, ValueError):
        return False


@contextlib.contextmanager
def _capture_hidden(decoder: nn.Module) -> Iterator[list[Tensor]]:
    """Collect the decoder's final hidden states (its ``last_hidden_state``) while the model runs.

    Only this thread's forward passes are collected: the embedded engine decodes with the same
    modules on its own thread while the learner runs (``num_batches_ahead``), and its one-token
    decode outputs must never be taken for the learner's hidden states.
    """
    seen: list[Tensor] = []
    owner = threading.get_ident()

    def hook(_module: nn.Module, _args: Any, output: Any) -> None:
        if threading.get_ident() == owner:
            seen.append(output[0] if isinstance(output, tuple) else output.last_hidden_state)

    handle = decoder.register_forward_hook(hook)
    try:
        yield seen
    finally:
        handle.remove()


def _run(model: Any, decoder: nn.Module, **inputs: Any) -> tuple[Tensor, Any]:
    """``(final hidden states [n, t, H], model output)`` with the head applied to the last position only.

    A Llama-family model on a CPU runs as plain tensor ops (`plain_forward`); anything else runs
    its own forward, whose decoder output a hook takes.
    """
    past = inputs.get("past_key_values")
    lm = _causal_lm(model)
    if isinstance(past, plain_forward.PlainCache) or (past is None and plain_forward.why_not(model, lm) is None):
        return plain_forward.forward(lm, inputs["input_ids"], inputs["attention_mask"], inputs["position_ids"], past)
    with _capture_hidden(decoder) as seen:
        out = model(**inputs, logits_to_keep=1)
    if not seen:
        raise RuntimeError(f"{type(decoder).__name__} did not run during the forward pass; cannot take hidden states")
    return seen[-1], out


def learner_forward(model: Any, autocast: bool = False) -> str:
    """Which forward the learner runs on ``model``, and why not the plain one (the start-up banner says it)."""
    lm = _causal_lm(model)
    reason = "autocast" if autocast else plain_forward.why_not(model, lm)
    if reason is not None:
        return f"transformers' ({reason})"
    return "plain ops + LoRA updates" if model is not lm else "plain ops"


def _checkpointing(model: Any, lm: nn.Module) -> bool:
    """Gradient checkpointing in effect (it switches the KV cache off, so prompts cannot be shared).

    Asked of the wrapper and of the transformers model inside it: DDP does not forward attributes.
    """
    flags = ("is_activation_checkpointing", "is_gradient_checkpointing")
    on = any(bool(getattr(m, f, False)) for m in (model, lm) for f in flags)
    return on and bool(getattr(model, "training", False))


def _head_is_plain(lm: nn.Module, head: nn.Module, hidden: Tensor, logits: Tensor) -> bool:
    """Once per model: are the model's logits exactly ``head(hidden)``? (No soft-cap, no scale.)

    Anything the model does to logits after its head would be silently missing from the
    chunked path, so it is compared once on the position the model computed itself.
    """
    known = _HEAD_IS_PLAIN.get(lm)
    if known is not None:
        return known
    cfg = getattr(lm, "config", None)
    transformed = any(getattr(cfg, k, None) not in (None, 1, 1.0) for k in _LOGIT_TRANSFORMS)
    with torch.no_grad():
        mine = head(hidden[:, -1:].detach()).float()
        plain = not transformed and torch.allclose(mine, logits[:, -1:].detach().float(), rtol=1e-4, atol=1e-5)
    if not plain:
        log.warning("%s transforms its logits after the LM head; using the full-logits path (more memory)",
                    type(lm).__name__)
    _HEAD_IS_PLAIN[lm] = plain
    return plain


# ----------------------------------------------------------------------------- chunked head + log-softmax
def _blocks(rows: int) -> Iterator[slice]:
    """Row slices that split a chunk into `ROW_BLOCKS` pieces (float32 temporaries stay small)."""
    step = max(1, -(-rows // ROW_BLOCKS))
    for start in range(0, rows, step):
        yield slice(start, min(start + step, rows))


def _chunk_stats(logits: Tensor, targets: Tensor, temperature: float, entropy: bool) -> tuple[Tensor, ...]:
    """``(logp, logsumexp, entropy)`` of one chunk of raw head outputs ``[c, V]``, each ``[c]`` float32.

    Overwrites ``logits`` when it is float32 (it is a temporary of the caller): no second
    ``[c, V]`` buffer is made, only row blocks of it.
    """
    c = logits.shape[0]
    logp = torch.empty(c, dtype=torch.float32, device=logits.device)
    lse = torch.empty_like(logp)
    ent = torch.empty_like(logp) if entropy else None
    for b in _blocks(c):
        u = logits[b].float()  # the same storage when float32
        if temperature != 1.0:
            u.div_(temperature)
        top = u.amax(-1, keepdim=True)
        u.sub_(top)
        e = u.exp()
        total = e.sum(-1)
        log_total = total.log()
        logp[b] = u.gather(1, targets[b].unsqueeze(1)).squeeze(1) - log_total
        lse[b] = top.squeeze(1) + log_total
        if ent is not None:  # H = log Σe - Σ e·u / Σe ; e·u is 0·(-inf) = nan on banned tokens, which have p = 0
            ent[b] = log_total - e.mul_(u).nan_to_num_(nan=0.0).sum(-1) / total
    return logp, lse, ent


def _logit_grad_(logits: Tensor, targets: Tensor, lse: Tensor, ent: Tensor | None, g_logp: Tensor,
                 g_ent: Tensor | None, temperature: float) -> None:
    """Overwrite one chunk of head outputs ``[c, V]`` with the gradient of the loss with respect to them.

    With u = z / T and log p = u - lse: d logp_t/du = onehot_t - p and dH/du = -p (log p + H),
    so dL/dz = (g_logp onehot - p (g_logp + g_ent (log p + H))) / T, made a row block at a time.
    """
    for b in _blocks(logits.shape[0]):
        u = logits[b].float()
        if temperature != 1.0:
            u.div_(temperature)
        u.sub_(lse[b].unsqueeze(1))  # log p
        p = u.exp()
        g1 = g_logp[b].unsqueeze(1)
        if g_ent is not None and ent is not None:
            u.add_(ent[b].unsqueeze(1)).mul_(g_ent[b].unsqueeze(1)).add_(g1).mul_(p).neg_().nan_to_num_(nan=0.0)
        else:
            u.copy_(p.mul_(g1).neg_())
        u.scatter_add_(1, targets[b].unsqueeze(1), g1)
        if temperature != 1.0:
            u.div_(temperature)
        if u.data_ptr() != logits[b].data_ptr():
            logits[b].copy_(u)


@dataclass(frozen=True)
class _Autocast:
    """The forward's autocast state, re-entered when backward recomputes the head."""

    device_type: str
    enabled: bool
    dtype: torch.dtype

    @classmethod
    def current(cls, device: torch.device) -> _Autocast:
        kind = device.type
        return cls(kind, torch.is_autocast_enabled(kind), torch.get_autocast_dtype(kind))

    def context(self) -> contextlib.AbstractContextManager[Any]:
        if not self.enabled:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)


class _HeadLogp(torch.autograd.Function):
    """``head`` + log-softmax over chunks of positions; backward recomputes each chunk's logits.

    Saved for backward: the hidden states ``[M, H]`` and three ``[M]`` vectors, never logits.
    The head's trainable parameters are explicit inputs, so their gradient (summed over the
    chunks) reaches autograd once, like any other use of a parameter (DDP hooks fire once).
    """

    @staticmethod
    def forward(ctx: Any, hidden: Tensor, targets: Tensor, head: nn.Module, temperature: float, chunk: int,
                entropy: bool, entropy_grad: bool, *params: Tensor) -> tuple[Tensor, Tensor]:
        logp, lse, ent = _chunked_forward(head, hidden, targets, temperature, chunk, entropy or entropy_grad)
        ent_out = ent if ent is not None else logp.new_zeros(0)
        ctx.save_for_backward(hidden, targets, lse, ent_out, *params)
        ctx.head, ctx.temperature, ctx.chunk, ctx.entropy_grad = head, temperature, chunk, entropy_grad
        ctx.autocast = _Autocast.current(hidden.device)
        if not entropy_grad:
            ctx.mark_non_differentiable(ent_out)
        return logp, ent_out

    @staticmethod
    def backward(ctx: Any, g_logp: Tensor, g_ent: Tensor | None) -> tuple[Tensor | None, ...]:
        hidden, targets, lse, ent, *params = ctx.saved_tensors
        grad_hidden = torch.zeros_like(hidden) if ctx.needs_input_grad[0] else None
        grad_params: list[Tensor | None] = [None] * len(params)
        use_ent = ctx.entropy_grad and g_ent is not None
        manual = _plain_linear(ctx.head)
        for start in range(0, hidden.shape[0], ctx.chunk):
            s = slice(start, start + ctx.chunk)
            h = hidden[s].detach().requires_grad_(grad_hidden is not None and not manual)
            with torch.set_grad_enabled(not manual), ctx.autocast.context():
                z = ctx.head(h)
            buf = z.detach()  # the logits become their own gradient, in place
            _logit_grad_(buf, targets[s], lse[s], ent[s] if use_ent else None, g_logp[s],
                         g_ent[s] if use_ent and g_ent is not None else None, ctx.temperature)
            if manual:
                grad_h = _linear_backward_(ctx.head, h, buf, params, grad_params)
            else:
                grad_h = _module_backward_(z, h if grad_hidden is not None else None, buf, params, grad_params)
            del z, buf
            if grad_hidden is not None and grad_h is not None:
                grad_hidden[s] = grad_h
        return (grad_hidden, None, None, None, None, None, None, *grad_params)


def _plain_linear(head: nn.Module) -> bool:
    """An ``nn.Linear`` without hooks: its backward is written out (`_linear_backward_`)."""
    return type(head) is nn.Linear and not (head._forward_hooks or head._forward_pre_hooks)


def _accumulate(grads: list[Tensor | None], i: int, g: Tensor) -> None:
    grads[i] = g if grads[i] is None else grads[i].add_(g)  # type: ignore[union-attr]


def _linear_backward_(head: nn.Module, h: Tensor, grad_z: Tensor, params: Sequence[Tensor],
                      grads: list[Tensor | None]) -> Tensor:
    """Gradients of ``z = h W^T + b`` given dL/dz, the weight's summed over chunks in place.

    Autograd would return a new ``[V, H]`` weight gradient per chunk and add it to the running
    sum: one more vocabulary-sized tensor (2 GB for a 7B model's float32 head) for nothing.
    Products are taken in dL/dz's dtype, like autocast's backward does.
    """
    low = grad_z.dtype
    weight = head.weight
    grad_h = (grad_z @ weight.to(low)).to(h.dtype)
    for i, p in enumerate(params):
        if p is weight:
            if grads[i] is None:
                grads[i] = torch.zeros_like(weight)
            acc = grads[i]
            assert acc is not None
            if acc.dtype == low:
                acc.addmm_(grad_z.t(), h.to(low))
            else:
                acc.add_(grad_z.t() @ h.to(low))
        elif p is head.bias:
            _accumulate(grads, i, grad_z.sum(0).to(p.dtype))
    return grad_h


def _module_backward_(z: Tensor, h: Tensor | None, grad_z: Tensor, params: Sequence[Tensor],
                      grads: list[Tensor | None]) -> Tensor | None:
    """Gradients through any head module (e.g. a LoRA-wrapped one) by autograd."""
    wrt = ([h] if h is not None else []) + list(params)
    out = list(torch.autograd.grad(z, wrt, grad_outputs=grad_z, allow_unused=True))
    grad_h = out.pop(0) if h is not None else None
    for i, g in enumerate(out):
        if g is not None:
            _accumulate(grads, i, g)
    return grad_h


def _chunked_forward(head: nn.Module, hidden: Tensor, targets: Tensor, temperature: float, chunk: int,
                     entropy: bool) -> tuple[Tensor, Tensor, Tensor | None]:
    """`_chunk_stats` over ``chunk``-position pieces of ``hidden [M, H]``, without autograd."""
    parts: list[tuple[Tensor, ...]] = []
    with torch.no_grad():
        for start in range(0, hidden.shape[0], chunk):
            s = slice(start, start + chunk)
            parts.append(_chunk_stats(head(hidden[s]), targets[s], temperature, entropy))
    logp = torch.cat([p[0] for p in parts])
    lse = torch.cat([p[1] for p in parts])
    ent = torch.cat([p[2] for p in parts]) if entropy else None  # type: ignore[misc]
    return logp, lse, ent


def head_logps(head: nn.Module, hidden: Tensor, targets: Tensor, temperature: float = 1.0, *,
               chunk_tokens: int = DEFAULT_CHUNK_TOKENS, entropy: bool = False,
               entropy_grad: bool = False) -> tuple[Tensor, Tensor | None]:
    """log p(target) (and the entropy) at each row of ``hidden [M, H]``, in chunks of ``chunk_tokens`` rows.

    Differentiable (with bounded memory) when grad is enabled; the entropy carries a gradient
    only with ``entropy_grad`` (it is otherwise a metric and costs one extra pass per block).
    """
    if hidden.shape[0] == 0:
        empty = hidden.new_zeros(0, dtype=torch.float32)
        return empty, (empty if entropy or entropy_grad else None)
    want_ent = entropy or entropy_grad
    params = [p for p in head.parameters() if p.requires_grad]
    if torch.is_grad_enabled() and (hidden.requires_grad or params):
        logp, ent = _HeadLogp.apply(hidden, targets, head, temperature, chunk_tokens, entropy, entropy_grad, *params)
        return logp, (ent if want_ent else None)
    logp, _, ent = _chunked_forward(head, hidden, targets, temperature, chunk_tokens, want_ent)
    return logp, ent


# ----------------------------------------------------------------------------- positions
@dataclass
class _Positions:
    """The trained positions, flattened: hidden states predicting them, their tokens, where they go."""

    hidden: Tensor  # [M, H]
    targets: Tensor  # [M]
    flat: Tensor  # [M] index into the [N * (L - 1)] target grid
    anchor: Tensor  # a tensor of the graph, so an empty selection still backpropagates (zeros)


def _scatter(values: Tensor | None, pos: _Positions, shape: Sequence[int]) -> Tensor | None:
    """Values at the selected positions, 0 elsewhere, as ``[N, L - 1]`` float32."""
    if values is None:
        return None
    grid = torch.zeros(shape[0] * shape[1], dtype=torch.float32, device=pos.flat.device)
    out = grid.index_copy(0, pos.flat, values).view(*shape)
    if values.numel() == 0 and pos.anchor.requires_grad:
        out = out + pos.anchor.sum() * 0.0
    return out


def _plain_positions(model: Any, decoder: nn.Module, batch: TrainBatch) -> tuple[_Positions, Tensor, Tensor]:
    """One forward pass over the whole rows but their last column (it predicts nothing)."""
    width = batch.input_ids.shape[1] - 1
    run = slice(None, max(width, 1))
    hidden, out = _run(model, decoder, input_ids=batch.input_ids[:, run], attention_mask=batch.attention_mask[:, run],
                       position_ids=batch.position_ids[:, run], use_cache=False)
    rows, cols = batch.loss_mask.to(torch.bool).nonzero(as_tuple=True)
    pos = _Positions(hidden=hidden[rows, cols], targets=batch.input_ids[rows, cols + 1],
                     flat=rows * width + cols, anchor=hidden)
    return pos, hidden, out.logits


@dataclass
class _Sharing:
    """Which rows share a prompt, with the lengths the shared path needs, read from the device once."""

    reps: list[int]  # representative row of each distinct prompt
    row_to_prompt: list[int]  # each row's prompt index
    prompt_lens: list[int]
    total_lens: list[int]


def _sharing(batch: TrainBatch) -> _Sharing:
    """One device-to-host copy of the per-row facts (a round trip per row would stall a GPU each time)."""
    assert batch.prompt_lens is not None
    keys = batch.prompt_ids if batch.prompt_ids is not None else batch.group_ids
    facts = torch.stack([keys, batch.prompt_lens, batch.attention_mask.sum(1)]).tolist()
    ids, plens, lens = facts
    if batch.prompt_ids is None:  # hand-built batches: prompts compared by their tokens, on the host
        tokens = batch.input_ids.tolist()
        ids = [hash((g, tuple(tokens[i][:p]))) for i, (g, p) in enumerate(zip(ids, plens, strict=True))]
    first: dict[int, int] = {}
    for i, key in enumerate(ids):
        first.setdefault(key, i)
    reps = list(first.values())
    index = {key: u for u, key in enumerate(first)}
    return _Sharing(reps, [index[key] for key in ids], plens, lens)


def _left_aligned(ids: Tensor, starts: Tensor, lengths: Tensor, width: int, *, right_pad: bool) -> tuple[Tensor, ...]:
    """``ids[i, starts[i] : starts[i] + lengths[i]]`` per row in a ``[N, width]`` grid, left- or
    right-padded with 0, and its mask: one gather instead of a copy per row."""
    col = torch.arange(width, device=ids.device).unsqueeze(0)
    offset = col - (width - lengths.unsqueeze(1)) if not right_pad else col
    valid = (offset >= 0) & (offset < lengths.unsqueeze(1))
    src = (starts.unsqueeze(1) + offset).clamp(0, ids.shape[1] - 1)
    grid = ids.gather(1, src)
    return torch.where(valid, grid, torch.zeros_like(grid)), valid.long()


BUCKET_SLACK = 0.25
"""A completion bucket's padding may reach this share of its real tokens (`length_buckets`)."""
MAX_BUCKETS = 8
"""At most this many completion passes per micro-batch (each costs one pass's fixed overhead)."""


def length_buckets(lengths: Sequence[int], slack: float = BUCKET_SLACK, max_buckets: int = MAX_BUCKETS) -> list[list[int]]:
    """Rows grouped by length, longest first, so that padding each group to its longest row wastes
    at most ``slack`` of its real tokens; one group when that saves under a quarter of the padding.

    Completions of one step differ in length (an answer of 20 tokens beside one of 900); run
    together, every row is padded to the longest. Rows are taken longest first and a group
    grows while ``rows x width <= (1 + slack) x real tokens``. Beyond ``max_buckets`` groups
    (each is a pass of its own), the neighbours whose merge adds the least padding are merged.
    """
    order = sorted(range(len(lengths)), key=lambda r: -lengths[r])
    groups: list[list[int]] = []
    real = 0
    for r in order:
        if groups and (len(groups[-1]) + 1) * lengths[groups[-1][0]] <= (1 + slack) * (real + lengths[r]):
            groups[-1].append(r)
            real += lengths[r]
        else:
            groups.append([r])
            real = lengths[r]
    while len(groups) > max(1, max_buckets):
        i = min(range(len(groups) - 1),
                key=lambda k: len(groups[k + 1]) * (lengths[groups[k][0]] - lengths[groups[k + 1][0]]))
        groups[i : i + 2] = [groups[i] + groups[i + 1]]
    padded = sum(len(g) * lengths[g[0]] for g in groups)
    if len(groups) <= 1 or padded > 0.75 * len(order) * lengths[order[0]]:
        return [list(range(len(lengths)))]
    return groups


def _cache_rows(cache: Any, idx: Tensor) -> Any:
    """A copy of ``cache`` holding rows ``idx`` (its tensors index-selected, so gradients flow back)."""
    import copy

    from verifiers.inference.engine import kv

    out = copy.copy(cache)
    out.layers = [copy.copy(layer) for layer in cache.layers]
    kv.select_rows(out, idx)
    return out


def _shared_positions(model: Any, decoder: nn.Module, batch: TrainBatch,
                      sharing: _Sharing) -> tuple[_Positions, Tensor, Tensor]:
    """Each distinct prompt once (only its last hidden state is kept), then the completions on its KV cache.

    On a CPU the completions run in length buckets (`length_buckets`) when their lengths differ
    enough: each bucket is padded to its own longest completion, on its own copy of the prompts'
    cache. On an accelerator they run as one pass (one host round trip whatever the batch).
    """
    from verifiers.inference.engine import kv

    device = batch.input_ids.device
    plens = batch.prompt_lens
    assert plens is not None
    # 1. each distinct prompt once, left-padded
    reps = torch.tensor(sharing.reps, dtype=torch.long, device=device)
    P = max(sharing.prompt_lens[r] for r in sharing.reps)
    pid, pmask = _left_aligned(batch.input_ids.index_select(0, reps), torch.zeros_like(reps),
                               plens.index_select(0, reps), P, right_pad=False)
    ppos = (pmask.cumsum(1) - 1).clamp(min=0)
    prompt_hidden, out = _run(model, decoder, input_ids=pid, attention_mask=pmask, position_ids=ppos, use_cache=True)
    idx = torch.tensor(sharing.row_to_prompt, dtype=torch.long, device=device)
    cache = out.past_key_values
    first = prompt_hidden[:, -1, :].index_select(0, idx)
    del out, prompt_hidden
    # 2. the completions (everything after the prompt, env tokens included) on top
    comp_lens = [t - p for t, p in zip(sharing.total_lens, sharing.prompt_lens, strict=True)]
    # Buckets save padded compute, which is what a CPU pays for; each costs a pass and a host
    # round trip (the trained positions' nonzero), which is what a GPU pays for: one pass there.
    buckets = length_buckets(comp_lens) if device.type == "cpu" else [list(range(len(comp_lens)))]
    row_mask = pmask.index_select(0, idx)
    if len(buckets) == 1:  # every row, in order, on the prompts' cache itself
        kv.select_rows(cache, idx)
        return _completion_positions(model, decoder, batch, None, first, row_mask, cache, max(comp_lens))
    parts: list[_Positions] = []
    for rows_b in buckets:
        b = torch.tensor(rows_b, dtype=torch.long, device=device)
        part, hidden, logits = _completion_positions(model, decoder, batch, b, first, row_mask,
                                                     _cache_rows(cache, idx.index_select(0, b)),
                                                     max(comp_lens[r] for r in rows_b))
        parts.append(part)
    pos = _Positions(hidden=torch.cat([p.hidden for p in parts]), targets=torch.cat([p.targets for p in parts]),
                     flat=torch.cat([p.flat for p in parts]), anchor=parts[0].anchor)
    return pos, hidden, logits


def _completion_positions(model: Any, decoder: nn.Module, batch: TrainBatch, rows: Tensor | None, first: Tensor,
                          prompt_mask: Tensor, cache: Any, C: int) -> tuple[_Positions, Tensor, Tensor]:
    """The completions of ``rows`` (None: every row) on ``cache`` (their prompts' keys and values):
    the trained positions, the last hidden states and the logits of the pass."""
    device = batch.input_ids.device
    width = batch.input_ids.shape[1]
    plens = batch.prompt_lens
    assert plens is not None
    ids, lmask, lens = batch.input_ids, batch.loss_mask, batch.attention_mask.sum(1)
    if rows is not None:
        ids, lmask, lens, plens = (ids.index_select(0, rows), lmask.index_select(0, rows), lens.index_select(0, rows),
                                   plens.index_select(0, rows))
        first, prompt_mask = first.index_select(0, rows), prompt_mask.index_select(0, rows)
    clens = lens - plens
    cid, cmask = _left_aligned(ids, plens, clens, C, right_pad=True)
    cpos = plens.unsqueeze(1) + torch.arange(C, device=device).unsqueeze(0)
    # The last column predicts nothing inside any row, so it is not run (1/C of the pass saved).
    run = max(C - 1, 1)
    hidden, out = _run(model, decoder, input_ids=cid[:, :run], attention_mask=torch.cat([prompt_mask, cmask[:, :run]], 1),
                       position_ids=cpos[:, :run], past_key_values=cache, use_cache=True)
    # completion token j is predicted by the prompt's last position (j = 0) or completion j - 1;
    # it is target plens - 1 + j of its row
    pred = torch.cat([first.unsqueeze(1), hidden[:, : C - 1, :]], dim=1)
    j = torch.arange(C, device=device).unsqueeze(0)
    target_col = plens.unsqueeze(1) - 1 + j
    trained = (j < clens.unsqueeze(1)) & lmask.to(torch.bool).gather(1, target_col.clamp(max=width - 2))
    r, cols = trained.nonzero(as_tuple=True)
    batch_rows = r if rows is None else rows.index_select(0, r)
    pos = _Positions(hidden=pred[r, cols], targets=cid[r, cols], flat=batch_rows * (width - 1) + target_col[r, cols],
                     anchor=pred)
    return pos, hidden, out.logits


def completion_logps(
    model: Any,
    batch: TrainBatch,
    temperature: float = 1.0,
    *,
    entropy_grad: bool = False,
    share_prompts: bool = True,
    with_entropy: bool = True,
    chunk_tokens: int | None = DEFAULT_CHUNK_TOKENS,
) -> tuple[Tensor, Tensor | None]:
    """``(logp, entropy)``, each ``[N, L-1]`` float32 over targets like ``batch.loss_mask``.

    Only positions in ``batch.loss_mask`` are computed; the rest are 0 (nothing reads them:
    the loss zeroes every input outside the mask). ``entropy`` is None unless ``with_entropy``
    or ``entropy_grad``; it carries a gradient only with ``entropy_grad``. ``chunk_tokens``
    bounds the logits alive at once (None: the full-logits path, `full_logits_logps`).
    """
    lm = _causal_lm(model)
    head = lm.get_output_embeddings() if hasattr(lm, "get_output_embeddings") else None
    if chunk_tokens is None or head is None or not _keeps_logits(lm) or _HEAD_IS_PLAIN.get(lm) is False:
        return full_logits_logps(model, batch, temperature, entropy_grad=entropy_grad, with_entropy=with_entropy)
    decoder = lm.get_decoder()
    shared = share_prompts and not _checkpointing(model, lm) and batch.prompt_lens is not None
    sharing = _sharing(batch) if shared else None
    if sharing is not None and min(sharing.prompt_lens) >= 1 and len(sharing.reps) < len(batch):
        pos, last_hidden, logits = _shared_positions(model, decoder, batch, sharing)
    else:
        pos, last_hidden, logits = _plain_positions(model, decoder, batch)
    if not _head_is_plain(lm, head, last_hidden, logits):
        return full_logits_logps(model, batch, temperature, entropy_grad=entropy_grad, with_entropy=with_entropy)
    del last_hidden, logits
    logp, ent = head_logps(head, pos.hidden, pos.targets, temperature, chunk_tokens=chunk_tokens,
                           entropy=with_entropy, entropy_grad=entropy_grad)
    shape = (batch.input_ids.shape[0], batch.input_ids.shape[1] - 1)
    out = _scatter(logp, pos, shape)
    assert out is not None
    return out, _scatter(ent, pos, shape)
