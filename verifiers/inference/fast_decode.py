"""Moved to `verifiers.inference.engine.fast_decode`; kept so old imports work.

Nothing in verifiers or trainers imports this path (tests/test_layers.py checks); import
`verifiers.inference.engine.fast_decode` instead.
"""

from verifiers.inference.engine.fast_decode import *  # noqa: F403
