"""Moved to `verifiers.inference.engine.loading`; kept so old imports work.

Nothing in verifiers or trainers imports this path (tests/test_layers.py checks); import
`verifiers.inference.engine.loading` instead.
"""

from verifiers.inference.engine.loading import *  # noqa: F403
