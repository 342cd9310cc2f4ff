"""Moved to `verifiers.models.source`; kept so old imports work.

Nothing in verifiers or trainers imports this path (tests/test_layers.py checks); import
`verifiers.models.source` instead.
"""

from verifiers.models.source import *  # noqa: F403
