"""Moved to `verifiers.inference.engine.devices`; kept so old imports work.

Nothing in verifiers or trainers imports this path (tests/test_layers.py checks); import
`verifiers.inference.engine.devices` instead.
"""

from verifiers.inference.engine.devices import *  # noqa: F403
