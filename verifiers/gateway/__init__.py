"""Interception gateway: run unmodified agent programs against the environment's model.

See docs/agents.md. `get_gateway()` returns the process's gateway; an environment opens one
`Session` per rollout and reads back its `GatewayCall` records (with token ids).
`token_prompt_for(tokenizer)` makes follow-up calls token-exact (see `verifiers.gateway.token_in`).
"""

from verifiers.gateway.records import GatewayCall, SessionLimits
from verifiers.gateway.server import InterceptionGateway, get_gateway
from verifiers.gateway.session import Session
from verifiers.gateway.token_in import TokenIn, TokenInStats, token_prompt_for

__all__ = [
    "GatewayCall", "InterceptionGateway", "Session", "SessionLimits", "TokenIn", "TokenInStats", "get_gateway",
    "token_prompt_for",
]
