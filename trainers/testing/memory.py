"""Peak tensor memory of a block of code, measured on the CPU.

GPU time is rare, so memory bounds of the learner (e.g. "never a ``[rows, tokens, vocab]``
float32 tensor") have to be proven on the CPU. The CPU allocator has no peak counter like
``torch.cuda.max_memory_allocated``, so `PeakMemory` counts at the op level instead: a
``TorchDispatchMode`` sees the output of every aten op (forward, backward and optimizer ops
alike, since the mode sits below autograd), adds the bytes of each storage it has not seen
yet to a live counter, and subtracts them again when that storage is freed (a
``weakref.finalize`` on the storage, whose Python object PyTorch keeps alive exactly as long
as the C++ storage). The peak of that counter is the figure.

What is counted: storages *created* inside the block by an op. An output that shares its
storage with one of the op's inputs (a view, an in-place op, an optimizer update of a
parameter) is not a new allocation and is skipped, so tensors alive before the block never
count, even when the block writes into them. What is not seen: scratch space a kernel
allocates internally and frees before returning (e.g. inside ``torch.logsumexp``), and
tensors built from Python data without an op (``torch.tensor([...])``); both make the figure
a lower bound of the allocator's true peak. oneDNN's packed weights (opaque tensors without a
storage, `verifiers.inference.engine.projections.pack`) count with the bytes oneDNN reports for them.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


def _storage_ptrs(values: Any) -> set[int]:
    """Data pointers of every tensor storage in a (nested) argument structure."""
    ptrs: set[int] = set()
    for leaf in tree_flatten(values)[0]:
        if isinstance(leaf, torch.Tensor) and not leaf.is_mkldnn:
            ptrs.add(leaf.untyped_storage().data_ptr())
    return ptrs


class PeakMemory(TorchDispatchMode):
    """``with PeakMemory() as mem: ...`` then ``mem.peak_bytes``: most storage bytes alive at once.

    ``live_bytes`` is what is still alive (of what the block created); ``reset_peak()``
    starts a new peak from the current live figure, to measure phases of one block.
    """

    def __init__(self) -> None:
        super().__init__()
        self._live: dict[Any, int] = {}  # storage pointer, or ("mkldnn", id) of an opaque tensor
        self.live_bytes = 0
        self.peak_bytes = 0
        self.allocations = 0

    def reset_peak(self) -> None:
        """Forget the peak so far; the next peak is measured from what is alive now."""
        self.peak_bytes = self.live_bytes

    def _free(self, key: Any) -> None:
        size = self._live.pop(key, None)
        if size is not None:
            self.live_bytes -= size

    def _record(self, tensor: torch.Tensor, inputs: set[int]) -> None:
        if tensor.is_mkldnn:  # opaque: no storage; keyed by the object, freed with it
            self._add(("mkldnn", id(tensor)), int(torch.ops.mkldnn._nbytes(tensor)), tensor)
            return
        storage = tensor.untyped_storage()
        ptr, size = storage.data_ptr(), storage.nbytes()
        if size == 0 or ptr in inputs or ptr in self._live:
            return
        self._add(ptr, size, storage)

    def _add(self, key: Any, size: int, owner: Any) -> None:
        """Count ``size`` live bytes under ``key`` until ``owner`` is freed."""
        self._live[key] = size
        self.live_bytes += size
        self.allocations += 1
        self.peak_bytes = max(self.peak_bytes, self.live_bytes)
        weakref.finalize(owner, self._free, key)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        inputs = _storage_ptrs((args, kwargs))
        for leaf in tree_flatten(out)[0]:
            if isinstance(leaf, torch.Tensor):
                self._record(leaf, inputs)
        return out



# ----------------------------------------------------------------------------- learner figures
def learner_peak_bytes(model: Any, batch: Any, logps: Any) -> int:
    """Peak of one learner forward + backward: ``logps(model, batch) -> [N, L-1]``, loss = Σ mask · logp.

    Gradients start as None, so every gradient the step makes counts, as on a first step.
    """
    model.zero_grad(set_to_none=True)
    mask = batch.loss_mask.to(torch.bool)
    with PeakMemory() as mem:
        logp = logps(model, batch)
        torch.where(mask, logp, torch.zeros_like(logp)).sum().backward()
        del logp
    model.zero_grad(set_to_none=True)
    return mem.peak_bytes


def body_peak_bytes(model: Any, batch: Any) -> int:
    """The same step without logits: the model's own activations and gradients, the floor of any logprob path.

    The model runs with its head on one position per row (``logits_to_keep=1``) and the loss is
    a fixed linear function of the final hidden states, so backward goes through every layer
    (and the embeddings) as in training; the LM head's weight gradient is made too.
    """
    from trainers.grpo.learn.logprobs import _capture_hidden, _causal_lm

    model.zero_grad(set_to_none=True)
    decoder = _causal_lm(model).get_decoder()
    with PeakMemory() as mem:
        with _capture_hidden(decoder) as seen:
            out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                        position_ids=batch.position_ids, use_cache=False, logits_to_keep=1)
        (seen[-1].sum() + out.logits.sum()).backward()
        del out, seen
    model.zero_grad(set_to_none=True)
    return mem.peak_bytes


__all__ = ["PeakMemory", "body_peak_bytes", "learner_peak_bytes"]
