"""Moved to `verifiers.inference.vllm.server`; kept so old imports work.

Nothing in verifiers or trainers imports this path (tests/test_layers.py checks); import
`verifiers.inference.vllm.server` instead.
"""

from verifiers.inference.vllm.server import *  # noqa: F403
