"""Moved to `verifiers.inference.vllm.admin`; kept so old imports work.

Nothing in verifiers or trainers imports this path (tests/test_layers.py checks); import
`verifiers.inference.vllm.admin` instead.
"""

from verifiers.inference.vllm.admin import *  # noqa: F403
