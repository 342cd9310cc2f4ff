"""Moved to `verifiers.inference.server.sse`; kept so old imports work.

Nothing in verifiers or trainers imports this path (tests/test_layers.py checks); import
`verifiers.inference.server.sse` instead.
"""

from verifiers.inference.server.sse import *  # noqa: F403
