"""The engine's decoding step and prefill of a Llama-family model written as plain tensor ops, for CPUs.

Why: on a small model a decoding step is dominated by per-call work around the arithmetic, not
by the arithmetic. transformers' generic forward builds a 4-D mask on every call, writes RMSNorm
as five ops and rotary embeddings with concatenations per layer, dispatches the cache update
through its ``Cache`` classes and runs SDPA's flash kernel for a single query row. Here the same
arithmetic runs with one fused ``rms_norm`` per norm, the rotation looked up by position with one
sign-folded sine (`RotaryTable`), keys and values written straight into the engine's `SlotKV`,
grouped-query attention as two batched products, and the projections as oneDNN products of packed
copies of the weights (`verifiers.inference.engine.projections`). For 64 completions of 16 tokens on one
thread this takes 0.70x transformers' time at 0.8M parameters and 0.52x at 25M
(`benchmarks/fast_decode.py`). The prefill (`FastDecoder.prefill`) runs `forward_tokens`, the
multi-token forward the learner shares (with autograd), writing each layer's keys and values
straight into the prompts' slots.

The packed copy is rebuilt whenever the weights may have changed (see `FastDecoder`), so an
update the trainer makes under the engine's pause (or a model shared with the learner) is used
by the next step. A peft LoRA model (a LoRA run's policy) decodes here too: its base model's
step with each active adapter's low-rank update added to its projection's product
(`verifiers.inference.engine.lora`).
`why_not` refuses anything whose forward this would not reproduce: other architectures,
sliding-window layers, quantized projections or LoRA variants (DoRA and the like), hooks,
float16/bfloat16 weights and non-CPU devices; the engine then keeps transformers' forward.
Outputs match it to float32 rounding (tests compare logits and greedy tokens for Llama, Qwen2
and Qwen3, and a LoRA model's).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from verifiers.inference.engine.lora import lora_base, with_lora
from verifiers.inference.engine.lora import projection_ok as lora_projection_ok
from verifiers.inference.engine.product_choice import choose
from verifiers.inference.engine.projections import ModuleProjections, PackedProjections, Projections

ARCHITECTURES = ("LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM")
"""Models whose decoder layer is exactly: RMSNorm, attention (optional q/k norm, biases), RMSNorm, SwiGLU MLP."""


def _plain(module: Any, kind: type) -> bool:
    """Exactly ``kind`` (not a subclass such as a LoRA or quantized layer) and without hooks."""
    return type(module) is kind and not (module._forward_hooks or module._forward_pre_hooks)


def _is_rms_norm(module: Any) -> bool:
    return (type(module).__name__.endswith("RMSNorm") and hasattr(module, "variance_epsilon")
            and not (module._forward_hooks or module._forward_pre_hooks))


def why_not(model: Any, projection_ok: Callable[[Any], bool] | None = None) -> str | None:
    """Why `FastDecoder` cannot stand in for ``model``'s forward, or None when it can.

    ``projection_ok`` judges each attention and MLP projection (default: a plain ``nn.Linear``
    without hooks); the learner passes one that also accepts the LoRA layers it reproduces. A peft
    LoRA model is judged by its base model with those LoRA layers accepted (`verifiers.inference.engine.lora`).
    """
    import torch
    from torch import nn

    base = lora_base(model)
    if base is not None:
        return why_not(base, projection_ok or lora_projection_ok)
    name = type(model).__name__
    if name not in ARCHITECTURES:
        return f"{name} is not one of {', '.join(ARCHITECTURES)}"
    param = next(model.parameters())
    if param.device.type not in ("cpu", "cuda"):
        return f"weights on {param.device.type} (the fast path runs on CPUs and CUDA GPUs)"
    if param.device.type == "cpu" and param.dtype != torch.float32:
        return f"{param.dtype} weights on a CPU (the fast path there is float32 only)"
    if param.dtype not in (torch.float32, torch.bfloat16):
        return f"{param.dtype} weights (the fast path is float32 or, on a GPU, bfloat16)"
    cfg = model.config
    if getattr(cfg, "hidden_act", "silu") != "silu":
        return f"hidden_act {cfg.hidden_act!r}"
    if float(getattr(cfg, "attention_dropout", 0.0) or 0.0) != 0.0:
        return "attention dropout (a model in training mode would drop weights while decoding)"
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if inner is None or layers is None or not hasattr(inner, "rotary_emb"):
        return "no model.layers / model.rotary_emb"
    if not (_plain(inner.embed_tokens, nn.Embedding) and _plain(model.lm_head, nn.Linear) and _is_rms_norm(inner.norm)):
        return "embedding, head or final norm is not a plain module"
    for i, layer in enumerate(layers):
        attn, mlp = layer.self_attn, layer.mlp
        if getattr(attn, "sliding_window", None) is not None:
            return f"layer {i} uses sliding-window attention"
        projections = (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj)
        if not all(projection_ok(p) if projection_ok else _plain(p, nn.Linear) for p in projections):
            return f"layer {i} has a projection that is not a plain nn.Linear (LoRA, quantized or hooked)"
        norms = [layer.input_layernorm, layer.post_attention_layernorm]
        norms += [n for n in (getattr(attn, "q_norm", None), getattr(attn, "k_norm", None)) if n is not None]
        if not all(_is_rms_norm(n) for n in norms):
            return f"layer {i} has a norm that is not an RMSNorm"
        if any(m._forward_hooks or m._forward_pre_hooks for m in (layer, attn, mlp)):
            return f"layer {i} has forward hooks"
    return None


def _pack_reason(model: Any, packed: bool | None) -> str | None:
    """Why the decoder multiplies by the modules' own weights (None: by packed copies)."""
    if packed is False:
        return "packed weights are off"
    problem = PackedProjections.unavailable(model)
    if problem is not None or packed:
        return problem
    return choose(model, "inference").reason()


class FastDecoder:
    """``model``'s decoding step (one new token per row) on the engine's `SlotKV` cache.

    Build it with `FastDecoder.for_model`, which returns None where `why_not` objects.

    ``packed``: run the projections from oneDNN-packed copies of the weights (`PackedProjections`)
    where `PackedProjections.unavailable` has no objection: True always, None (the default) where
    they are measured faster on this machine at this model's shapes (`product_choice`: 2-3x on an
    AMD EPYC, none on an Intel Xeon), False never; ``pack_reason`` says why not. The copy is
    rebuilt before the next forward once `weights_changed` is called (the engine calls it when a
    pause ends and when the weight version goes up) or once a projection weight is replaced or
    written in place with autograd's knowledge.
    """

    def __init__(self, model: Any, *, packed: bool | None = None) -> None:
        base = lora_base(model)
        # A peft LoRA model runs as its base model's step with the adapters' updates added (`projections`).
        self.lora = base is not None
        model = base if base is not None else model
        cfg = model.config
        self.model = model
        self.heads = int(cfg.num_attention_heads)
        self.kv_heads = int(getattr(cfg, "num_key_value_heads", None) or self.heads)
        self.head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads)
        self.qk_norm = hasattr(model.model.layers[0].self_attn, "q_norm")
        self.pack_reason = _pack_reason(model, packed)
        self._plain = ModuleProjections(model)
        self._packed: PackedProjections | None = None
        self.rotary = RotaryTable(model.model.rotary_emb)

    @classmethod
    def for_model(cls, model: Any, *, packed: bool | None = None) -> FastDecoder | None:
        return cls(model, packed=packed) if why_not(model) is None else None

    def weights_changed(self) -> None:
        """The model's weights may have changed (in any way): repack before the next forward."""
        self._packed = None

    def projections(self) -> Projections:
        """The packed projections, repacked first if the weights changed; the modules' own without
        packing; with a LoRA model's active adapters' updates added."""
        import torch

        # Under CPU autocast the products must be F.linear's (autocast's bf16 casts; oneDNN's packed
        # float32 primitive refuses bf16 inputs).
        if self.pack_reason is not None or torch.is_autocast_enabled("cpu"):
            base: Projections = self._plain
        else:
            if self._packed is None or not self._packed.fits(self.model):
                self._packed = PackedProjections(self.model)
            base = self._packed
        # The adapters as they are now (active, disabled, merged), read at every step: a merge writes
        # the base weights through ``.data``, which `fits` cannot see, so it must happen while the
        # engine is paused (whose end calls `weights_changed`), as the trainer's merges do.
        return (with_lora(base, self.model) or base) if self.lora else base

    def __call__(self, input_ids: Any, position_ids: Any, attn: Any, kv: Any) -> Any:
        """Logits ``[rows, vocab]`` for ``input_ids [rows]`` at ``position_ids [rows]``.

        ``attn`` is the ``[rows, width]`` padding mask (1 = a real token, the new one included) and
        ``kv`` the cache, already planned for this step (`SlotKV.plan_decode`): it stores each
        layer's new key and value and hands back the live ``[rows, kv_heads, width, head_dim]`` views.
        """
        import torch
        import torch.nn.functional as F

        inner, rows, width = self.model.model, int(input_ids.shape[0]), int(attn.shape[1])
        H, KV, D = self.heads, self.kv_heads, self.head_dim
        G = H // KV
        h = F.embedding(input_ids, inner.embed_tokens.weight)
        rotate = self.rotary.rotation(h, position_ids, width)
        blocked = (attn == 0).view(rows, 1, 1, width)
        proj = self.projections()
        for i, layer in enumerate(inner.layers):
            a = layer.self_attn
            q, k, v = proj.qkv(i, rms_norm(h, layer.input_layernorm))
            q, k, v = q.view(rows, H, D), k.view(rows, KV, D), v.view(rows, KV, 1, D)
            if self.qk_norm:
                q, k = rms_norm(q, a.q_norm), rms_norm(k, a.k_norm)
            keys, values = kv.write(i, rotate(k).unsqueeze(2), v)
            # Explicit 3-D batched products over (row, kv head): the cache views fold into one batch
            # axis without a copy, which matmul's 4-D path does not find (25M: 655 -> 346 us a layer).
            scores = torch.bmm(rotate(q).reshape(rows * KV, G, D), keys.reshape(rows * KV, width, D).transpose(1, 2))
            lowest = torch.finfo(scores.dtype).min  # bf16 under autocast
            scores = scores.view(rows, KV, G, width).mul_(a.scaling).masked_fill_(blocked, lowest)
            # float32 softmax whatever the weights' dtype, as SDPA's kernels do (a bf16 softmax loses
            # about two digits of the probabilities); a no-op conversion for float32 weights.
            probs = torch.softmax(scores, -1, dtype=torch.float32).to(scores.dtype).view(rows * KV, G, width)
            out = torch.bmm(probs, values.reshape(rows * KV, width, D)).view(rows, H * D)
            h = h + proj.o(i, out)
            h = h + proj.mlp(i, rms_norm(h, layer.post_attention_layernorm))
        return proj.head(rms_norm(h, inner.norm))

    def prefill(self, input_ids: Any, position_ids: Any, attn: Any, kv: Any) -> Any:
        """Logits ``[rows, vocab]`` at the last column of a prefill chunk ``input_ids [rows, n]``.

        ``attn`` is the rows' ``[rows, offset + n]`` padding mask and ``kv`` the cache, planned for
        this chunk (`SlotKV.plan_prefill`): each layer's keys and values go straight into its slots.
        """
        proj = self.projections()
        hidden = forward_tokens(self.model, input_ids, attn, position_ids, kv.write, proj, self.rotary)
        return proj.head(hidden[:, -1])


def forward_tokens(lm: Any, input_ids: Any, attention_mask: Any, position_ids: Any,
                   write: Callable[[int, Any, Any], tuple[Any, Any]], proj: Projections | None = None,
                   rotary: RotaryTable | None = None) -> Any:
    """Final hidden states ``[N, T, H]`` (after the last norm) of ``lm`` on ``input_ids [N, T]``, as plain ops.

    The multi-token forward shared by the engine's prefill and the learner (which runs it with
    autograd). ``attention_mask`` is ``[N, P + T]`` (1 = a real token) over the ``P`` columns
    already cached and the new ones; ``write(layer, k, v)`` stores a layer's new keys and values
    (``[N, kv_heads, T, head_dim]``, rotated) and returns the layer's whole ``[N, kv_heads, P + T,
    head_dim]`` keys and values. Rows may be left- or right-padded: a padding query attends to
    itself only (its output is never used), so no row of the softmax is empty, and padding keys are
    masked for every real query, as in transformers. SDPA's fused kernel, not explicit products: at
    long rows (an SFT warm-up's whole episodes) explicit ``[T, P + T]`` score matrices cost more than
    all the per-op work this saves.
    """
    import torch
    import torch.nn.functional as F

    inner, cfg = lm.model, lm.config
    heads = int(cfg.num_attention_heads)
    kv_heads = int(getattr(cfg, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // heads)
    rows, width = input_ids.shape
    cached = attention_mask.shape[1] - width

    emb = inner.embed_tokens
    h = F.embedding(input_ids, emb.weight, emb.padding_idx)
    rotate = (rotary or RotaryTable(inner.rotary_emb, cache=False)).rotation(h, position_ids, cached + width)

    real = attention_mask.to(torch.bool)
    causal = torch.ones(width, width, dtype=torch.bool, device=h.device).tril()
    own = torch.eye(width, dtype=torch.bool, device=h.device)
    allowed = torch.cat([real[:, None, :cached].expand(rows, width, cached),
                         (causal & real[:, None, cached:]) | own], dim=2)
    allowed = allowed.unsqueeze(1)  # [N, 1, T, P + T], one mask for every head

    proj = proj or ModuleProjections(lm)
    for i, layer in enumerate(inner.layers):
        attn = layer.self_attn
        q, k, v = proj.qkv(i, rms_norm(h, layer.input_layernorm))
        q = q.view(rows, width, heads, head_dim)
        k, v = k.view(rows, width, kv_heads, head_dim), v.view(rows, width, kv_heads, head_dim)
        if getattr(attn, "q_norm", None) is not None:
            q, k = rms_norm(q, attn.q_norm), rms_norm(k, attn.k_norm)
        k, v = write(i, rotate(k).transpose(1, 2), v.transpose(1, 2))
        out = F.scaled_dot_product_attention(rotate(q).transpose(1, 2), k, v, attn_mask=allowed,
                                             scale=attn.scaling, enable_gqa=True)
        h = h + proj.o(i, out.transpose(1, 2).reshape(rows, width, -1))
        h = h + proj.mlp(i, rms_norm(h, layer.post_attention_layernorm))
    return rms_norm(h, inner.norm)


class RotaryTable:
    """A model's rotary embedding as a function of position: cos and sign-folded sin, looked up by position.

    Why: the rotary module costs about ten op dispatches and two decorators per call, and a
    decoding step needs only its rows' positions. For rope types whose frequencies are fixed
    (default, linear, llama3, yarn), the module itself computes the table once for positions up to
    a power of two beyond the longest row seen; it is recomputed if its frequencies change (a
    buffer replaced or written). Other types (dynamic, longrope: frequencies depend on the length)
    call the module every time, as ``cache=False`` does.
    """

    STATIC = ("default", "linear", "llama3", "yarn")

    def __init__(self, rotary: Any, *, cache: bool = True) -> None:
        self.module = rotary
        self.cache = cache and getattr(rotary, "rope_type", None) in self.STATIC
        self._key: tuple[Any, ...] = ()
        self._cos: Any = None
        self._sin: Any = None

    def rotation(self, x: Any, position_ids: Any, limit: int) -> Callable[[Any], Any]:
        """``rotate(t)`` for ``t [*position_ids.shape, heads, head_dim]``; every position is below ``limit``."""
        import torch

        if self.cache:
            cos, sin = self._table(x, limit)
            cos, sin = torch.nn.functional.embedding(position_ids, cos), torch.nn.functional.embedding(position_ids, sin)
        else:
            cos, sin = _fold(*self.module(x, position_ids))  # rope type and attention scaling included
        cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)  # one rotation for every head
        half = cos.shape[-1] // 2

        def rotate(t: Any) -> Any:
            return t * cos + torch.cat([t[..., half:], t[..., :half]], -1) * sin

        return rotate

    def _table(self, x: Any, limit: int) -> tuple[Any, Any]:
        import torch

        freq = self.module.inv_freq
        key = (freq.data_ptr(), freq._version, getattr(self.module, "attention_scaling", None), x.dtype, x.device)
        if key != self._key or self._cos.shape[0] < limit:
            size = max(256, 1 << (max(limit, 1) - 1).bit_length())
            positions = torch.arange(size, device=x.device).view(1, size)
            with torch.no_grad():
                cos, sin = _fold(*self.module(x, positions))
            self._cos, self._sin, self._key = cos[0], sin[0], key
        return self._cos, self._sin


def _fold(cos: Any, sin: Any) -> tuple[Any, Any]:
    """``cos`` and ``sin`` with rotate_half's sign folded into ``sin``'s first half."""
    import torch

    half = sin.shape[-1] // 2
    return cos, torch.cat([-sin[..., :half], sin[..., half:]], -1)


def rms_norm(x: Any, norm: Any) -> Any:
    """``norm`` (a transformers RMSNorm module) applied to ``x`` as one ``F.rms_norm`` call."""
    import torch.nn.functional as F

    return F.rms_norm(x, (x.shape[-1],), norm.weight, norm.variance_epsilon)
