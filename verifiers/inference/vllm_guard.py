"""Moved to `verifiers.inference.vllm.guard`; kept so old imports work.

Nothing in verifiers or trainers imports this path (tests/test_layers.py checks); import
`verifiers.inference.vllm.guard` instead.
"""

from verifiers.inference.vllm.guard import *  # noqa: F403
