"""Moved to `verifiers.inference.engine.projections`; kept so old imports work.

Nothing in verifiers or trainers imports this path (tests/test_layers.py checks); import
`verifiers.inference.engine.projections` instead.
"""

from verifiers.inference.engine.projections import *  # noqa: F403
