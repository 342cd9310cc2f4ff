"""Moved to `verifiers.inference.server.protocol`; kept so old imports work.

Nothing in verifiers or trainers imports this path (tests/test_layers.py checks); import
`verifiers.inference.server.protocol` instead.
"""

from verifiers.inference.server.protocol import *  # noqa: F403
