"""Moved to `verifiers.inference.server.runner`; kept so old imports work.

Nothing in verifiers or trainers imports this path (tests/test_layers.py checks); import
`verifiers.inference.server.runner` instead.
"""

from verifiers.inference.server.runner import *  # noqa: F403
