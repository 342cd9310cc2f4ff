"""Moved to `verifiers.inference.server.tool_parser`; kept so old imports work.

Nothing in verifiers or trainers imports this path (tests/test_layers.py checks); import
`verifiers.inference.server.tool_parser` instead.
"""

from verifiers.inference.server.tool_parser import *  # noqa: F403
