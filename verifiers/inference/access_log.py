"""Moved to `verifiers.inference.server.access_log`; kept so old imports work.

Nothing in verifiers or trainers imports this path (tests/test_layers.py checks); import
`verifiers.inference.server.access_log` instead.
"""

from verifiers.inference.server.access_log import *  # noqa: F403
