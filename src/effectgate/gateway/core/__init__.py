"""The effect core: the state machine, the moves, the driver, the effect protocol and its operator verbs."""

from __future__ import annotations

from effectgate.gateway.core.clock import Clock, SystemClock
from effectgate.gateway.core.limits import LimitsDesk, PolicyError, ToolPolicy
from effectgate.gateway.core.limits.policy import refuse_unstorable, unstorable
from effectgate.gateway.core.observer import ExecuteWatch, Observer, ProviderWatch
from effectgate.gateway.core.operators.inbox import MASK, Watch, masked_payload
from effectgate.gateway.core.operators.operator import LEASE_PATIENCE, Operations
from effectgate.gateway.core.operators.waits import Waits, decided, settled
from effectgate.gateway.core.protocol import (
    Collaborators,
    DriverSettings,
    EffectProtocol,
    ExecuteCommand,
    ExecuteResult,
    ReplayCache,
    TtlCache,
    policy_of,
    validate_context,
)
from effectgate.gateway.core.provider.lag import LagBook, LagSampler, quantile
from effectgate.gateway.core.provider.reports import AdapterTenants, Applied, Busy, ProviderReports, Replayed
from effectgate.gateway.core.tools import BoundTool, ToolSet
from effectgate.gateway.core.transitions import IllegalTransition, Policy

__all__ = [
    "LEASE_PATIENCE",
    "MASK",
    "AdapterTenants",
    "Applied",
    "BoundTool",
    "Busy",
    "Clock",
    "Collaborators",
    "DriverSettings",
    "EffectProtocol",
    "ExecuteCommand",
    "ExecuteResult",
    "ExecuteWatch",
    "IllegalTransition",
    "LagBook",
    "LagSampler",
    "LimitsDesk",
    "Observer",
    "Operations",
    "Policy",
    "PolicyError",
    "ProviderReports",
    "ProviderWatch",
    "ReplayCache",
    "Replayed",
    "SystemClock",
    "ToolPolicy",
    "ToolSet",
    "TtlCache",
    "Waits",
    "Watch",
    "decided",
    "masked_payload",
    "policy_of",
    "quantile",
    "refuse_unstorable",
    "settled",
    "unstorable",
    "validate_context",
]
