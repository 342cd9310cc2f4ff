"""Moved to `verifiers.inference.server.api`; kept so old imports work.

Nothing in verifiers or trainers imports this path (tests/test_layers.py checks); import
`verifiers.inference.server.api` instead.
"""

from verifiers.inference.server.api import *  # noqa: F403
