"""A continuous-batching generation engine over a transformers causal LM (see `core.InferenceEngine`).

``core`` holds the engine (lifecycle, submission, admission, weights), ``step`` one decoding step
over the running batch, ``outputs`` the host-side work per sequence, ``requests`` the request and
output types, ``checks`` a request's limits, ``weights`` the all-or-nothing weight check.
Below them: ``kv`` (the preallocated KV slots) and ``kv_budget`` (how many tokens fit),
``sampling``, the decoding paths (``fast_decode`` over ``projections``, ``cuda_graphs``),
``attention``, ``devices``, ``loading`` (a model directory into a model and tokenizer) and
``model_facts``. Nothing here imports the HTTP server (`verifiers.inference.server`) or the
vLLM side (`verifiers.inference.vllm`); they sit above the engine.
"""

from verifiers.inference.engine.core import InferenceEngine
from verifiers.inference.engine.requests import (
    InvalidRequestError,
    RequestOutput,
    SequenceOutput,
    StreamDelta,
    WeightMismatchError,
)

__all__ = [
    "InferenceEngine",
    "InvalidRequestError",
    "RequestOutput",
    "SequenceOutput",
    "StreamDelta",
    "WeightMismatchError",
]
