"""Moved to `verifiers.inference.engine.attention`; kept so old imports work.

Nothing in verifiers or trainers imports this path (tests/test_layers.py checks); import
`verifiers.inference.engine.attention` instead.
"""

from verifiers.inference.engine.attention import *  # noqa: F403
