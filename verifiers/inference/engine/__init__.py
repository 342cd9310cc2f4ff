"""A continuous-batching generation engine over a transformers causal LM (see `core.InferenceEngine`).

``core`` holds the engine (lifecycle, submission, admission, weights), ``step`` one decoding step
over the running batch, ``outputs`` the host-side work per sequence, ``requests`` the request and
output types, ``weights`` the all-or-nothing weight check.
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
