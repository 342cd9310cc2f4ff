"""Moved to `verifiers.inference.engine.cuda_graphs`; kept so old imports work.

Nothing in verifiers or trainers imports this path (tests/test_layers.py checks); import
`verifiers.inference.engine.cuda_graphs` instead.
"""

from verifiers.inference.engine.cuda_graphs import *  # noqa: F403
