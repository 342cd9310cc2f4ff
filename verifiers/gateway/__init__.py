"""Interception gateway: run unmodified agent programs against the environment's model.

See docs/agents.md. `get_gateway()` returns the process's gateway; an environment opens one
`Session` per rollout and reads back its `GatewayCall` records (with token ids).
"""

from verifiers.gateway.records import GatewayCall, SessionLimits
from verifiers.gateway.server import InterceptionGateway, get_gateway
from verifiers.gateway.session import Session

__all__ = ["GatewayCall", "InterceptionGateway", "Session", "SessionLimits", "get_gateway"]
