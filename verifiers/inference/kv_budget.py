"""Moved to `verifiers.inference.engine.kv_budget`; kept so old imports work.

Nothing in verifiers or trainers imports this path (tests/test_layers.py checks); import
`verifiers.inference.engine.kv_budget` instead.
"""

from verifiers.inference.engine.kv_budget import *  # noqa: F403
