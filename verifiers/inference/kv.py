"""Moved to `verifiers.inference.engine.kv`; kept so old imports work.

Nothing in verifiers or trainers imports this path (tests/test_layers.py checks); import
`verifiers.inference.engine.kv` instead.
"""

from verifiers.inference.engine.kv import *  # noqa: F403
