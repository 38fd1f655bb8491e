"""Limits agents cannot exceed (docs/limits.md): payload bounds, reservations, approval rules,
one effect per scope, circuit breakers."""

from __future__ import annotations

from effectgate.gateway.core.limits.breaker import Breaker
from effectgate.gateway.core.limits.policy import PolicyError, ToolPolicy
from effectgate.gateway.core.limits.rules import RuleError
from effectgate.gateway.core.limits.usage_and_grants import GRANT_TTL, LimitsDesk

__all__ = ["GRANT_TTL", "Breaker", "LimitsDesk", "PolicyError", "RuleError", "ToolPolicy"]
