"""Moved to `verifiers.inference.server.connections`; kept so old imports work.

Nothing in verifiers or trainers imports this path (tests/test_layers.py checks); import
`verifiers.inference.server.connections` instead.
"""

from verifiers.inference.server.connections import *  # noqa: F403
