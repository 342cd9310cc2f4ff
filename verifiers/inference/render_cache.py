"""Moved to `verifiers.inference.server.render_cache`; kept so old imports work.

Nothing in verifiers or trainers imports this path (tests/test_layers.py checks); import
`verifiers.inference.server.render_cache` instead.
"""

from verifiers.inference.server.render_cache import *  # noqa: F403
