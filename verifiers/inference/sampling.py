"""Moved to `verifiers.inference.engine.sampling`; kept so old imports work.

Nothing in verifiers or trainers imports this path (tests/test_layers.py checks); import
`verifiers.inference.engine.sampling` instead.
"""

from verifiers.inference.engine.sampling import *  # noqa: F403
